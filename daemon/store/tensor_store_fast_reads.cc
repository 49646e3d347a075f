// TensorStore's side of reads without a round trip (issue 34; docs/architecture.md, "Reads
// without a round trip: the protocol"): the principals' directories, written at every event
// before any waiter is woken, and the sessions' lease tables, scanned before a version is freed.
// The rest of the store is tensor_store.cc.
#include <fcntl.h>
#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
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
  // Two memfds, held as long as the session: only while the daemon has descriptors to spare.
  if (options_.descriptors_to_spare && !principal.admin &&
      slot_tables_.Find(session_id) == nullptr) {
    if (absl::Status s = options_.descriptors_to_spare("open_fast_reads"); !s.ok()) return s;
  }
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
  entry.object = object.pin_token;
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
  return slot_tables_.Holdings([this](const Principal& reader, uint64_t token)
                                   ABSL_SHARED_LOCKS_REQUIRED(mu_) -> std::optional<uint64_t> {
                                     auto it = pin_tokens_.find(token);
                                     if (it == pin_tokens_.end()) return std::nullopt;
                                     const TensorObject& object = *objects_.at(it->second);
                                     if (!SpecAllows(reader, object.spec)) return std::nullopt;
                                     return object.id;
                                   });
}

void TensorStore::AskAboutLocked(const TensorObject& object, TableQuestion* question) const {
  if (slot_tables_.empty()) return;
  if (!question->tables.has_value()) question->tables = slot_tables_.Snap();
  question->wanted.emplace(object.pin_token,
                           VersionReaders{object.spec.owner_uid, object.spec.readers});
}

absl::StatusOr<uint64_t> TensorStore::NewPinTokenLocked() {
  while (true) {
    uint64_t token = 0;
    if (::getrandom(&token, sizeof(token), 0) != sizeof(token)) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "getrandom (a version's pin token)");
    }
    if (token != 0 && !pin_tokens_.contains(token)) return token;
  }
}

void TensorStore::ReclaimSlotPinnedLocked() {
  if (slot_pinned_.empty()) return;
  // One scan of each table that still pins something.
  std::map<std::string, absl::flat_hash_set<uint64_t>> named;
  for (const auto& [id, holders] : slot_pinned_) {
    for (const std::string& session : holders) named.try_emplace(session);
  }
  for (auto& [session, values] : named) values = slot_tables_.ValuesOf(session);
  std::vector<uint64_t> free;
  for (auto& [id, holders] : slot_pinned_) {
    const uint64_t token = objects_.at(id)->pin_token;
    holders.erase(std::remove_if(holders.begin(), holders.end(),
                                 [&](const std::string& session) {
                                   return !named.at(session).contains(token);
                                 }),
                  holders.end());
    if (holders.empty()) free.push_back(id);
  }
  FreeUnpinnedLocked(free);
}

void TensorStore::ForgetTableLocked(const std::string& session) {
  std::vector<uint64_t> free;
  for (auto& [id, holders] : slot_pinned_) {
    holders.erase(std::remove(holders.begin(), holders.end(), session), holders.end());
    if (holders.empty()) free.push_back(id);
  }
  FreeUnpinnedLocked(free);
}

void TensorStore::FreeUnpinnedLocked(const std::vector<uint64_t>& ids) {
  for (const uint64_t id : ids) {
    slot_pinned_.erase(id);
    TensorObject* object = objects_.at(id).get();
    // Nothing else keeps it (no name, no lease: MaybeFreeLocked asks the tables again if it
    // was granted one meanwhile).
    if (!object->pending && !object->published && object->leases == 0) FreeLocked(object);
  }
}

}  // namespace tensorbroker::daemon
