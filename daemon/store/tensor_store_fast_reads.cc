// TensorStore's side of reads without a round trip (issue 34; docs/architecture.md, "Reads
// without a round trip: the protocol"): the principals' directories, written at every event
// before any waiter is woken, and the sessions' lease tables, scanned before a version is freed.
// The rest of the store is tensor_store.cc.
#include <fcntl.h>

#include <cerrno>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/errno_status.h"
#include "daemon/store/store_lock.h"
#include "daemon/store/tensor_store.h"

namespace tensorbroker::daemon {
absl::Status TensorStore::OpenFastReads(const std::string& session_id) {
  Locked lock(this);
  if (absl::Status s = CheckServing(); !s.ok()) return s;
  if (absl::Status s = sessions_.Check(session_id); !s.ok()) return s;
  const Principal principal = sessions_.PrincipalOf(session_id);
  auto fill = [this](const Principal& reader, DirectoryWriter* writer)
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                    for (const auto& [name, entry] : names_.published()) {
                      const TensorObject& object = *objects_.at(entry.current());
                      if (!SpecAllows(reader, object.spec)) continue;
                      // A full directory is marked overflowing by later writes; the first fill
                      // of a principal with more names than records is rare enough to leave so.
                      (void)writer->Publish(DirectoryEntryLocked(object));
                    }
                  };
  if (auto directory = directories_.Open(session_id, principal, fill); !directory.ok()) {
    return directory.status();
  }
  if (auto table = slot_tables_.Open(session_id, principal); !table.ok()) {
    directories_.Close(session_id);
    return table.status();
  }
  return absl::OkStatus();
}

absl::StatusOr<SegmentDescriptor> TensorStore::FastReadDescriptor(const std::string& session_id,
                                                                  FastReadFile which) {
  Locked lock(this);
  if (absl::Status s = sessions_.Check(session_id); !s.ok()) return s;
  const MemfdSegment* memfd = which == FastReadFile::kDirectory ? directories_.Find(session_id)
                                                                : slot_tables_.Find(session_id);
  if (memfd == nullptr) {
    return absl::FailedPreconditionError("open_fast_reads: the session has no directory");
  }
  SegmentDescriptor descriptor;
  descriptor.segment = memfd->name();
  descriptor.size = memfd->size();
  descriptor.writable = which == FastReadFile::kLeaseTable;
  descriptor.fd.reset(::fcntl(descriptor.writable ? memfd->read_write_fd() : memfd->read_only_fd(),
                              F_DUPFD_CLOEXEC, 0));
  if (!descriptor.fd.valid()) return ErrnoStatus(errno, "duplicating a directory's descriptor");
  return descriptor;
}

DirectoryEntry TensorStore::DirectoryEntryLocked(const TensorObject& object) const {
  DirectoryEntry entry;
  entry.name = object.spec.name;
  entry.version = object.version;
  entry.object = object.id;
  entry.segment = object.block.segment;
  entry.offset = object.block.offset;
  entry.nbytes = object.spec.nbytes;
  entry.dtype = object.spec.dtype;
  const NameIndex::Published* name = names_.Find(object.spec.name);
  entry.owner_uid = name != nullptr ? name->owner_uid : object.spec.owner_uid;
  entry.ephemeral = object.spec.ephemeral;
  // A Get without a round trip is for immutable CPU tensors (read-only mappings); the others
  // have records for LatestVersion, without a layout.
  entry.has_layout = object.block.device.device_type == kDLCPU && !object.spec.is_mutable &&
                     object.block.read_only_fd >= 0;
  entry.shape = object.spec.shape;
  entry.strides = object.spec.strides;
  return entry;
}

void TensorStore::UpdateDirectoriesLocked(StoreEvent::Kind kind, const TensorObject& object) {
  if (directories_.empty()) return;
  switch (kind) {
    case StoreEvent::Kind::kPublished:
    case StoreEvent::Kind::kReplaced:
      directories_.Publish(DirectoryEntryLocked(object), [&](const Principal& reader) {
        return SpecAllows(reader, object.spec);
      });
      return;
    case StoreEvent::Kind::kDeleted:
      directories_.Unpublish(object.spec.name);
      return;
    case StoreEvent::Kind::kExpired:  // an older kept version: directories hold current ones
    case StoreEvent::Kind::kLost:
      return;
  }
}

uint64_t TensorStore::LeaseTableScans() const {
  Locked lock(this);
  return slot_tables_.table_scans();
}

TensorStore::TableHoldings TensorStore::TableHoldingsLocked() const {
  if (slot_tables_.empty()) return {};
  return slot_tables_.Holdings(
      [this](const Principal& reader, uint64_t object_id) ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        auto it = objects_.find(object_id);
        return it != objects_.end() && SpecAllows(reader, it->second->spec);
      });
}

void TensorStore::ReclaimSlotPinnedLocked() {
  if (slot_pinned_.empty()) return;
  ReclaimSlotPinnedLocked(TableHoldingsLocked());
}

void TensorStore::ReclaimSlotPinnedLocked(const TableHoldings& held) {
  const std::vector<uint64_t> pinned(slot_pinned_.begin(), slot_pinned_.end());
  for (const uint64_t id : pinned) {
    if (held.contains(id)) continue;
    slot_pinned_.erase(id);
    auto it = objects_.find(id);
    if (it == objects_.end()) continue;
    TensorObject* object = it->second.get();
    if (!object->pending && !object->published && object->leases == 0) FreeLocked(object);
  }
}

TensorView TensorStore::WithTableLeases(const TableHoldings& held, const TensorObject& object,
                                        TensorView view) {
  if (auto it = held.find(object.id); it != held.end()) view.leases += it->second;
  return view;
}

}  // namespace tensorbroker::daemon
