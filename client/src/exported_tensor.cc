#include "client/src/exported_tensor.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/src/fast_reads.h"
#include "client/src/fork_guard.h"
#include "client/src/region_mapper.h"
#include "common/cuda_runtime.h"
#include "common/wire/proto_convert.h"

namespace tensorbroker::client_internal {
namespace {

// One broker lease (of the Connection that was granted it) and the mapping it keeps valid.
struct LeaseHold;

// The leases this process shares, by tensor version and how it is mapped: every Client of the
// process finds them, so a process holds one lease per version however many Clients it has.
class ProcessLeases {
 public:
  std::shared_ptr<LeaseHold> Find(const std::string& key) {
    MutexLock lock(mu_);
    auto it = holds_.find(key);
    return it == holds_.end() ? nullptr : it->second.lock();
  }
  // Records `hold` unless another live one got there first; returns the one that is shared.
  std::shared_ptr<LeaseHold> ShareOrRemember(const std::string& key,
                                             const std::shared_ptr<LeaseHold>& hold) {
    MutexLock lock(mu_);
    std::weak_ptr<LeaseHold>& slot = holds_[key];
    if (auto existing = slot.lock()) return existing;
    slot = hold;
    return hold;
  }
  // The live holds whose lease `connection` was granted.
  std::vector<std::shared_ptr<LeaseHold>> HeldThrough(const Connection* connection);
  // Moves `hold` to the lease `lease_id` of `connection` (under the lock HeldThrough reads by).
  void MoveLease(LeaseHold* hold, std::shared_ptr<Connection> connection, uint64_t lease_id);
  // Drops the entry of an expired hold, unless a newer holder took the key.
  void Forget(const std::string& key) {
    MutexLock lock(mu_);
    auto it = holds_.find(key);
    if (it != holds_.end() && it->second.expired()) holds_.erase(it);
  }

 private:
  Mutex mu_;
  std::map<std::string, std::weak_ptr<LeaseHold>> holds_;  // guarded by mu_
};

// Never destroyed: deleters may run during static destruction.
ProcessLeases& Leases() {
  static ProcessLeases* const leases = new ProcessLeases();
  return *leases;
}

struct LeaseHold {
  // Both replaced by TakeLeasesAgain when the daemon restarted (under ProcessLeases' lock, by
  // a caller holding a reference, so never during the destructor).
  std::shared_ptr<Connection> connection;
  uint64_t lease_id = 0;
  // A lease this process wrote into its lease table instead (a Get from the directory): the
  // slot, given back by the destructor; lease_id is then 0.
  std::shared_ptr<FastReads> fast_reads;
  std::optional<uint32_t> slot;
  // What was leased: a restarted daemon that adopted the tensor has it at the same place.
  std::string name;
  uint64_t version = 0;
  std::string segment;
  uint64_t offset = 0;
  std::string key;  // in ProcessLeases; empty: not shared
  std::shared_ptr<const void> mapping;
  uint8_t* data = nullptr;
  DLDevice device{kDLCPU, 0};  // of the mapping, as this process sees it

  ~LeaseHold() {
    // Work the consumer queued on the tensor must finish before the daemon may reuse its
    // memory: frameworks call the deleter when the last host reference goes, kernels may still
    // be pending (on any stream, so the whole device is waited for).
    if (device.device_type == kDLCUDA) (void)CudaSynchronizeDevice(device.device_id);
    // Unmap before the lease ends: once it has, the daemon may free the memory, and freeing a
    // CUDA slab another process still has open is undefined behaviour.
    mapping.reset();
    if (connection == nullptr) return;
    if (!key.empty()) Leases().Forget(key);
    if (slot.has_value()) {
      // A store the daemon sees at its next scan; never from a forked child, whose table is
      // its parent's (the parent still holds the version).
      if (!InForkedChild()) fast_reads->Give(*slot);
    } else {
      connection->ReleaseLease(lease_id);
    }
  }
};

std::vector<std::shared_ptr<LeaseHold>> ProcessLeases::HeldThrough(const Connection* connection) {
  MutexLock lock(mu_);
  std::vector<std::shared_ptr<LeaseHold>> held;
  for (const auto& [key, weak] : holds_) {
    if (auto hold = weak.lock(); hold != nullptr && hold->connection.get() == connection) {
      held.push_back(std::move(hold));
    }
  }
  return held;
}

void ProcessLeases::MoveLease(LeaseHold* hold, std::shared_ptr<Connection> connection,
                              uint64_t lease_id) {
  MutexLock lock(mu_);
  hold->connection = std::move(connection);
  hold->lease_id = lease_id;
  hold->slot.reset();  // its table went with the old daemon
}

// The manager_ctx of every exported tensor.
struct ExportContext {
  std::shared_ptr<Connection> client;  // of the Client that returned it (for Retain, Describe)
  std::shared_ptr<LeaseHold> hold;
  // As the grant or the directory described the tensor, shared by every context Retain made
  // from this one and by Describe's callers; never changed once made. The DLTensor's shape and
  // strides point into it.
  std::shared_ptr<TensorInfo> info;
  int64_t no_dims[1] = {0};  // shape and strides of a 0-d tensor point here
  uint64_t flags = 0;
  DLDataType dtype{};
  DLManagedTensorVersioned versioned{};
  DLManagedTensor legacy{};
};

void DeleteVersioned(DLManagedTensorVersioned* self) {
  delete static_cast<ExportContext*>(self->manager_ctx);
}

void DeleteLegacy(DLManagedTensor* self) { delete static_cast<ExportContext*>(self->manager_ctx); }

// Sealed versions are shared; a pending tensor's (writable) lease is its creator's alone. The
// segment's name is unique to one daemon instance, the version within it.
std::string ShareKey(const v1::TensorGrant& grant, bool pinned) {
  if (!grant.info().sealed() || grant.info().version() == 0) return "";
  return absl::StrCat(grant.region().segment(), "#", grant.info().version(),
                      pinned ? "/pinned" : "", grant.region().writable() ? "/rw" : "");
}

absl::StatusOr<std::shared_ptr<LeaseHold>> HoldFor(std::shared_ptr<Connection> connection,
                                                   const v1::TensorGrant& grant, bool pinned) {
  const std::string key = ShareKey(grant, pinned);
  if (!key.empty()) {
    if (auto shared = Leases().Find(key)) {
      connection->ReleaseLease(grant.lease_id());  // one lease per version is enough
      return shared;
    }
  }
  auto hold = std::make_shared<LeaseHold>();
  hold->connection = connection;
  hold->lease_id = grant.lease_id();  // released by ~LeaseHold, also on failure below
  hold->name = grant.info().name();
  hold->version = grant.info().version();
  hold->segment = grant.region().segment();
  hold->offset = grant.region().offset();
  auto region = MapRegion(*connection, grant, pinned);
  if (!region.ok()) return region.status();
  hold->mapping = std::move(region->keepalive);
  hold->data = region->data;
  hold->device = region->device;
  if (key.empty()) return hold;
  hold->key = key;
  auto shared = Leases().ShareOrRemember(key, hold);
  // Another thread's Get of the same version won the race: share its lease; ours goes back.
  if (shared != hold) hold->key.clear();
  return shared;
}

// Fills `tensor` from the context (shared by both ABIs).
void FillTensor(ExportContext* context, DLTensor* tensor) {
  tensor->data = context->hold->data;
  tensor->device = context->hold->device;
  TensorInfo& info = *context->info;
  tensor->ndim = static_cast<int32_t>(info.shape.size());
  tensor->dtype = context->dtype;
  // Never NULL, also for 0-d tensors (DLPack 1.2 requires strides; some consumers read them).
  const bool scalar = info.shape.empty();
  tensor->shape = scalar ? context->no_dims : info.shape.data();
  tensor->strides = scalar ? context->no_dims : info.strides.data();
  tensor->byte_offset = 0;
}

absl::StatusOr<std::unique_ptr<ExportContext>> MakeContext(std::shared_ptr<Connection> connection,
                                                           const v1::TensorGrant& grant,
                                                           bool pinned) {
  auto context = std::make_unique<ExportContext>();
  const v1::TensorInfo& info = grant.info();
  if (info.strides_size() != info.shape_size()) {
    connection->ReleaseLease(grant.lease_id());
    return absl::DataLossError("daemon sent strides and shape of different lengths");
  }
  context->client = connection;
  auto hold = HoldFor(std::move(connection), grant, pinned);
  if (!hold.ok()) return hold.status();
  context->hold = *std::move(hold);
  context->info = std::make_shared<TensorInfo>(FromProto(info));
  context->info->device = context->hold->device;
  context->dtype = context->info->dtype;
  context->flags = grant.region().writable() ? 0 : DLPACK_FLAG_BITMASK_READ_ONLY;
  return context;
}

DLManagedTensorVersioned* Versioned(std::unique_ptr<ExportContext> context) {
  DLManagedTensorVersioned* out = &context->versioned;
  FillTensor(context.get(), &out->dl_tensor);
  out->version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  out->manager_ctx = context.get();
  out->deleter = &DeleteVersioned;
  out->flags = context->flags;
  context.release();
  return out;
}

absl::StatusOr<const ExportContext*> ContextOf(const DLManagedTensorVersioned& tensor,
                                               uint64_t client_id) {
  if (tensor.deleter != &DeleteVersioned || tensor.manager_ctx == nullptr) {
    return absl::InvalidArgumentError("tensor was not made by a tensorbroker Client");
  }
  const auto* context = static_cast<const ExportContext*>(tensor.manager_ctx);
  if (context->client->client_id() != client_id) {
    return absl::InvalidArgumentError("tensor was made by another tensorbroker Client");
  }
  return context;
}

// A context over `hold` for the version a directory record describes.
std::unique_ptr<ExportContext> ContextFromEntry(std::shared_ptr<Connection> connection,
                                                std::shared_ptr<LeaseHold> hold,
                                                DirectoryEntry entry) {
  auto context = std::make_unique<ExportContext>();
  context->client = std::move(connection);
  context->hold = std::move(hold);
  context->dtype = entry.dtype;
  context->flags = DLPACK_FLAG_BITMASK_READ_ONLY;
  context->info = std::make_shared<TensorInfo>();
  TensorInfo& info = *context->info;
  info.dtype = entry.dtype;
  info.shape = std::move(entry.shape);
  info.strides = std::move(entry.strides);
  info.nbytes = entry.nbytes;
  info.sealed = true;
  info.version = entry.version;
  info.owner_uid = entry.owner_uid;
  info.ephemeral = entry.ephemeral;
  info.name = std::move(entry.name);
  return context;
}

// A hold on the version `entry` describes through a slot of `reads`, if the record `found` still
// names it once the slot is taken (the protocol's steps 3 and 4); nullptr otherwise.
std::shared_ptr<LeaseHold> HoldThroughSlot(const std::shared_ptr<Connection>& connection,
                                           const std::shared_ptr<FastReads>& reads,
                                           const DirectoryReader::Found& found,
                                           std::shared_ptr<const MappedSegment> mapping) {
  const DirectoryEntry& entry = found.entry;
  std::optional<uint32_t> slot = reads->Take(entry.object);
  if (!slot.has_value()) return nullptr;  // the table is full: the daemon grants one
  if (!reads->StillCurrent(found)) {
    reads->Give(*slot);
    return nullptr;
  }
  auto hold = std::make_shared<LeaseHold>();
  hold->connection = connection;
  hold->fast_reads = reads;
  hold->slot = *slot;  // given back by ~LeaseHold, also when another hold wins below
  hold->name = entry.name;
  hold->version = entry.version;
  hold->segment = entry.segment;
  hold->offset = entry.offset;
  hold->data = mapping->data() + entry.offset;
  hold->mapping = std::move(mapping);
  return hold;
}

}  // namespace

std::optional<DLManagedTensorVersioned*> GetFromDirectory(
    const std::shared_ptr<Connection>& connection, const std::string& name,
    std::optional<uint64_t> after_version) {
  const std::shared_ptr<FastReads>& reads = connection->fast_reads();
  if (reads == nullptr) return std::nullopt;
  for (int attempt = 0; attempt < 4; ++attempt) {
    DirectoryReader::Found found = reads->Find(name);
    const DirectoryEntry& entry = found.entry;
    if (found.lookup != DirectoryReader::Lookup::kFound || entry.version == 0 ||
        !entry.has_layout || (after_version.has_value() && entry.version <= *after_version)) {
      return std::nullopt;
    }
    const std::string key = absl::StrCat(entry.segment, "#", entry.version);
    std::shared_ptr<LeaseHold> hold = Leases().Find(key);
    if (hold == nullptr) {
      auto mapping = connection->mapper().Find(entry.segment, MapMode::kReadOnly);
      // What the record says is only data: it must lie within the mapping.
      if (mapping == nullptr || entry.offset > mapping->size() ||
          entry.nbytes > mapping->size() - entry.offset) {
        return std::nullopt;
      }
      hold = HoldThroughSlot(connection, reads, found, std::move(mapping));
      if (hold == nullptr) continue;
      hold->key = key;
      if (auto shared = Leases().ShareOrRemember(key, hold); shared != hold) {
        hold->key.clear();
        hold = std::move(shared);
      }
    }
    return Versioned(ContextFromEntry(connection, std::move(hold), std::move(found.entry)));
  }
  return std::nullopt;
}

absl::StatusOr<DLManagedTensorVersioned*> ExportVersioned(std::shared_ptr<Connection> connection,
                                                          const v1::TensorGrant& grant,
                                                          bool pinned) {
  auto context = MakeContext(std::move(connection), grant, pinned);
  if (!context.ok()) return context.status();
  return Versioned(*std::move(context));
}

absl::StatusOr<DLManagedTensor*> ExportLegacy(std::shared_ptr<Connection> connection,
                                              const v1::TensorGrant& grant, bool pinned) {
  auto context = MakeContext(std::move(connection), grant, pinned);
  if (!context.ok()) return context.status();
  DLManagedTensor* out = &(*context)->legacy;
  FillTensor(context->get(), &out->dl_tensor);
  out->manager_ctx = context->get();
  out->deleter = &DeleteLegacy;
  context->release();
  return out;
}

absl::StatusOr<DLManagedTensorVersioned*> ShareVersioned(const DLManagedTensorVersioned& tensor,
                                                         uint64_t client_id) {
  auto existing = ContextOf(tensor, client_id);
  if (!existing.ok()) return existing.status();
  auto context = std::make_unique<ExportContext>();
  context->client = (*existing)->client;
  context->hold = (*existing)->hold;
  context->info = (*existing)->info;
  context->dtype = (*existing)->dtype;
  context->flags = (*existing)->flags;
  return Versioned(std::move(context));
}

absl::StatusOr<TensorInfo> InfoOf(const DLManagedTensorVersioned& tensor, uint64_t client_id) {
  auto context = ContextOf(tensor, client_id);
  if (!context.ok()) return context.status();
  return *(*context)->info;
}

absl::StatusOr<std::shared_ptr<const TensorInfo>> SharedInfoOf(
    const DLManagedTensorVersioned& tensor, uint64_t client_id) {
  auto context = ContextOf(tensor, client_id);
  if (!context.ok()) return context.status();
  return std::shared_ptr<const TensorInfo>((*context)->info);
}

size_t TakeLeasesAgain(const Connection& from, const std::shared_ptr<Connection>& to,
                       const GrantFetcher& fetch) {
  size_t taken = 0;
  for (const std::shared_ptr<LeaseHold>& hold : Leases().HeldThrough(&from)) {
    if (hold->device.device_type == kDLCUDA) continue;  // device memory died with the daemon
    auto grant = fetch(*to, hold->name, hold->version);
    if (!grant.ok()) continue;
    if (grant->info().version() != hold->version || grant->region().segment() != hold->segment ||
        grant->region().offset() != hold->offset) {
      to->ReleaseLease(grant->lease_id());  // the name moved on: nothing of ours to protect
      continue;
    }
    Leases().MoveLease(hold.get(), to, grant->lease_id());  // the old one ended with its daemon
    ++taken;
  }
  return taken;
}

}  // namespace tensorbroker::client_internal
