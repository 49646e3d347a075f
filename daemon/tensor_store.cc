#include "daemon/tensor_store.h"

#include <fcntl.h>

#include <cerrno>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/errno_status.h"

namespace tensorbroker::daemon {
namespace {

// 128 random bits: a session id is a bearer token, so it must not be guessable.
std::string NewSessionId() {
  std::random_device random;
  std::string id;
  for (int i = 0; i < 4; ++i) absl::StrAppend(&id, absl::Hex(random(), absl::kZeroPad8));
  return id;
}

}  // namespace

namespace {

std::vector<std::unique_ptr<MemoryPool>> OnePool(std::unique_ptr<MemoryPool> pool) {
  std::vector<std::unique_ptr<MemoryPool>> pools;
  pools.push_back(std::move(pool));
  return pools;
}

std::string DeviceText(DLDevice device) {
  if (device.device_type == kDLCPU) return "cpu";
  if (device.device_type == kDLCUDA) return absl::StrCat("cuda:", device.device_id);
  return absl::StrCat("device type ", device.device_type, " id ", device.device_id);
}

}  // namespace

TensorStore::TensorStore(std::unique_ptr<MemoryPool> cpu_pool)
    : TensorStore(OnePool(std::move(cpu_pool))) {}

TensorStore::TensorStore(std::vector<std::unique_ptr<MemoryPool>> pools)
    : pools_(std::move(pools)) {}

TensorStore::~TensorStore() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> removed;
  for (auto& [id, object] : objects_) PoolForLocked(object->block.device)->Free(object->block, &removed);
  objects_.clear();
}

MemoryPool* TensorStore::PoolForLocked(DLDevice device) const {
  for (const auto& pool : pools_) {
    const DLDevice served = pool->device();
    if (served.device_type == device.device_type && served.device_id == device.device_id) {
      return pool.get();
    }
  }
  return nullptr;
}

std::string TensorStore::OpenSession(int32_t pid, const std::string& client_name,
                                     SessionEventSink* sink, std::optional<uint32_t> uid) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string id = NewSessionId();
  sessions_[id] = Session{pid, client_name, sink, uid, {}};
  return id;
}

absl::Status TensorStore::CheckSessionUser(const std::string& session_id, uint32_t uid) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status s = CheckSession(session_id); !s.ok()) return s;
  const std::optional<uint32_t>& owner = sessions_.at(session_id).uid;
  if (owner.has_value() && *owner != uid) {
    return absl::PermissionDeniedError(
        absl::StrCat("session_id: the session belongs to another user (uid ", *owner, ")"));
  }
  return absl::OkStatus();
}

void TensorStore::UpdateSessionHello(const std::string& session_id, int32_t pid,
                                     const std::string& client_name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return;
  it->second.pid = pid;
  it->second.client_name = client_name;
}

TensorStore::SessionCleanup TensorStore::CloseSession(const std::string& session_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return {};
  const std::set<std::string> pending_names = std::move(it->second.pending_names);
  sessions_.erase(it);
  AnswerWaitersLocked([&](const Waiter& w) { return w.session_id == session_id; },
                      [](const Waiter&) -> absl::StatusOr<TensorGrant> {
                        return absl::FailedPreconditionError(
                            "session_id: the session closed while the Get waited");
                      });
  SessionCleanup cleanup;
  for (uint64_t object_id : leases_.RemoveSession(session_id)) {
    ReleaseLeaseOnLocked(object_id);
    ++cleanup.leases_released;
  }
  for (const std::string& name : pending_names) {
    auto pending = pending_.find(name);
    if (pending == pending_.end()) continue;
    DropPendingLocked(objects_.at(pending->second).get());
  }
  cleanup.pending_aborted = pending_names.size();
  return cleanup;
}

absl::Status TensorStore::CheckSession(const std::string& session_id) const {
  if (sessions_.count(session_id) == 0) {
    // The id itself is left out: session ids are capabilities, and this message is logged.
    return absl::FailedPreconditionError(
        "session_id: not an open session; open the Session stream first");
  }
  return absl::OkStatus();
}

absl::Status TensorStore::CheckServing() const {
  if (shutting_down_) return absl::UnavailableError("tensorbrokerd is shutting down");
  return absl::OkStatus();
}

absl::StatusOr<TensorStore::TensorObject*> TensorStore::ReserveLocked(const std::string& owner,
                                                                      const TensorSpec& spec) {
  if (absl::Status s = CheckServing(); !s.ok()) return s;
  if (pending_.count(spec.name) > 0) {
    return absl::AlreadyExistsError(absl::StrCat(
        "name '", spec.name, "' is being created by another request and is not sealed yet"));
  }
  if (!spec.replace && published_.count(spec.name) > 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("name '", spec.name, "' is already published (set replace to overwrite)"));
  }
  MemoryPool* pool = PoolForLocked(spec.device);
  if (pool == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "device ", DeviceText(spec.device), " is not served by this tensorbrokerd",
        spec.device.device_type == kDLCUDA ? " (--cuda-capacity is 0)" : ""));
  }
  std::vector<std::string> removed;
  auto block = pool->Allocate(spec.nbytes,
                              spec.is_mutable ? BlockKind::kMutable : BlockKind::kImmutable,
                              spec.owner_uid, &removed);
  NotifySegmentsRemovedLocked(removed);
  if (!block.ok()) {
    return absl::Status(block.status().code(), absl::StrCat("name '", spec.name, "' (",
                                                             spec.nbytes, " bytes): ",
                                                             block.status().message()));
  }
  auto object = std::make_unique<TensorObject>();
  object->id = next_object_id_++;
  object->spec = spec;
  object->block = *block;
  object->owner_session = owner;
  object->pending = true;
  object->created_unix_ms = absl::ToUnixMillis(absl::Now());
  TensorObject* raw = object.get();
  objects_.emplace(raw->id, std::move(object));
  pending_.emplace(spec.name, raw->id);
  if (auto session = sessions_.find(owner); session != sessions_.end()) {
    session->second.pending_names.insert(spec.name);
  }
  return raw;
}

absl::StatusOr<TensorGrant> TensorStore::Create(const std::string& session_id,
                                                const TensorSpec& spec) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status s = CheckSession(session_id); !s.ok()) return s;
  TensorSpec owned = spec;
  owned.owner_uid = sessions_.at(session_id).uid.value_or(spec.owner_uid);
  auto object = ReserveLocked(session_id, owned);
  if (!object.ok()) return object.status();
  return GrantLocked(session_id, *object, /*writable=*/true);
}

absl::StatusOr<TensorStore::TensorObject*> TensorStore::FindPendingLocked(
    const std::string& session_id, const std::string& name) {
  auto it = pending_.find(name);
  if (it == pending_.end()) {
    auto published = published_.find(name);
    if (published != published_.end() &&
        objects_.at(published->second)->owner_session == session_id) {
      return absl::FailedPreconditionError(
          absl::StrCat("name '", name, "' is already sealed"));
    }
    return absl::NotFoundError(
        absl::StrCat("name '", name, "' has no unsealed tensor (Create it first)"));
  }
  TensorObject* object = objects_.at(it->second).get();
  if (object->owner_session != session_id) {
    return absl::PermissionDeniedError(
        absl::StrCat("name '", name, "' is being created by another session"));
  }
  return object;
}

absl::StatusOr<TensorInfo> TensorStore::Seal(const std::string& session_id,
                                             const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status s = CheckSession(session_id); !s.ok()) return s;
  auto object = FindPendingLocked(session_id, name);
  if (!object.ok()) return object.status();
  sessions_.at(session_id).pending_names.erase(name);
  return PublishLocked(*object);
}

absl::Status TensorStore::Abort(const std::string& session_id, const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status s = CheckSession(session_id); !s.ok()) return s;
  auto object = FindPendingLocked(session_id, name);
  if (!object.ok()) return object.status();
  sessions_.at(session_id).pending_names.erase(name);
  DropPendingLocked(*object);
  return absl::OkStatus();
}

TensorInfo TensorStore::PublishLocked(TensorObject* object) {
  pending_.erase(object->spec.name);
  object->pending = false;
  object->sealed = true;
  object->version = next_version_++;
  if (auto old = published_.find(object->spec.name); old != published_.end()) {
    TensorObject* previous = objects_.at(old->second).get();
    previous->published = false;
    old->second = object->id;
    MaybeFreeLocked(previous);
  } else {
    published_.emplace(object->spec.name, object->id);
  }
  object->published = true;
  published_cv_.notify_all();
  const std::string& name = object->spec.name;
  AnswerWaitersLocked([&](const Waiter& w) { return w.name == name; },
                      [&](const Waiter& w) -> absl::StatusOr<TensorGrant> {
                        if (absl::Status s = CheckSession(w.session_id); !s.ok()) return s;
                        return GrantLocked(w.session_id, object, object->spec.is_mutable);
                      });
  return ViewLocked(*object);
}

void TensorStore::DropPendingLocked(TensorObject* object) {
  pending_.erase(object->spec.name);
  object->pending = false;
  MaybeFreeLocked(object);
}

absl::StatusOr<PutTicket> TensorStore::BeginPut(const TensorSpec& spec) {
  std::lock_guard<std::mutex> lock(mu_);
  auto object = ReserveLocked(kInternalSession, spec);
  if (!object.ok()) return object.status();
  return PutTicket{(*object)->id, (*object)->block.data, spec.nbytes, (*object)->block.device};
}

absl::StatusOr<TensorInfo> TensorStore::CommitPut(uint64_t object_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = objects_.find(object_id);
  if (it == objects_.end() || !it->second->pending) {
    return absl::InternalError("put ticket is no longer pending");
  }
  return PublishLocked(it->second.get());
}

void TensorStore::CancelPut(uint64_t object_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = objects_.find(object_id);
  if (it == objects_.end() || !it->second->pending) return;
  DropPendingLocked(it->second.get());
}

absl::StatusOr<ReadTicket> TensorStore::BeginRead(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status s = CheckServing(); !s.ok()) return s;
  auto it = published_.find(name);
  if (it == published_.end()) {
    return absl::NotFoundError(absl::StrCat("name '", name, "' is not published"));
  }
  TensorObject* object = objects_.at(it->second).get();
  TensorGrant grant = GrantLocked(kInternalSession, object, /*writable=*/false);
  return ReadTicket{std::move(grant.info), object->block.data, grant.lease_id};
}

void TensorStore::EndRead(uint64_t lease_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto object_id = leases_.Remove(kInternalSession, lease_id);
  if (object_id.ok()) ReleaseLeaseOnLocked(*object_id);
}

TensorGrant TensorStore::GrantLocked(const std::string& session_id, TensorObject* object,
                                     bool writable) {
  TensorGrant grant;
  grant.lease_id = leases_.Add(session_id, object->id);
  ++object->leases;
  grant.info = ViewLocked(*object);
  grant.block = object->block;
  grant.writable = writable;
  return grant;
}

std::optional<absl::StatusOr<TensorGrant>> TensorStore::TryGetLocked(
    const std::string& session_id, const std::string& name) {
  if (absl::Status s = CheckServing(); !s.ok()) return s;
  // The session may have closed while we waited: the lease would belong to no one.
  if (absl::Status s = CheckSession(session_id); !s.ok()) return s;
  auto it = published_.find(name);
  if (it == published_.end()) return std::nullopt;
  TensorObject* object = objects_.at(it->second).get();
  return GrantLocked(session_id, object, /*writable=*/object->spec.is_mutable);
}

std::optional<absl::StatusOr<TensorGrant>> TensorStore::GetOrWait(
    const std::string& session_id, const std::string& name, absl::Time deadline,
    uint64_t* waiter_id, GetCallback on_ready) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto now = TryGetLocked(session_id, name); now.has_value()) return now;
  if (absl::Now() >= deadline) {
    return absl::StatusOr<TensorGrant>(
        absl::NotFoundError(absl::StrCat("name '", name, "' is not published")));
  }
  *waiter_id = next_waiter_id_++;
  waiters_.emplace(*waiter_id, Waiter{session_id, name, std::move(on_ready)});
  return std::nullopt;
}

bool TensorStore::CancelWait(uint64_t waiter_id) {
  std::lock_guard<std::mutex> lock(mu_);
  return waiters_.erase(waiter_id) > 0;
}

void TensorStore::AnswerWaitersLocked(
    const std::function<bool(const Waiter&)>& matches,
    const std::function<absl::StatusOr<TensorGrant>(const Waiter&)>& answer) {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (!matches(it->second)) {
      ++it;
      continue;
    }
    Waiter waiter = std::move(it->second);
    it = waiters_.erase(it);
    waiter.on_ready(answer(waiter));
  }
}

absl::StatusOr<TensorGrant> TensorStore::Get(const std::string& session_id,
                                             const std::string& name, absl::Time deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  bool waited = false;
  while (true) {
    if (auto now = TryGetLocked(session_id, name); now.has_value()) return *std::move(now);
    if (absl::Now() >= deadline) {
      if (waited) {
        return absl::DeadlineExceededError(
            absl::StrCat("name '", name, "' was not published before the wait ran out"));
      }
      return absl::NotFoundError(absl::StrCat("name '", name, "' is not published"));
    }
    waited = true;
    published_cv_.wait_until(lock, absl::ToChronoTime(deadline));
  }
}

absl::Status TensorStore::Release(const std::string& session_id, uint64_t lease_id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status s = CheckSession(session_id); !s.ok()) return s;
  auto object_id = leases_.Remove(session_id, lease_id);
  if (!object_id.ok()) return object_id.status();
  ReleaseLeaseOnLocked(*object_id);
  return absl::OkStatus();
}

absl::StatusOr<SegmentDescriptor> TensorStore::DescriptorFor(const std::string& session_id,
                                                             uint64_t lease_id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status s = CheckSession(session_id); !s.ok()) return s;
  auto object_id = leases_.ObjectOf(session_id, lease_id);
  if (!object_id.ok()) return object_id.status();
  const TensorObject& object = *objects_.at(*object_id);
  if (object.block.read_only_fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "lease_id: ", lease_id, " is on a tensor in device memory, which has no descriptor"));
  }
  SegmentDescriptor descriptor;
  descriptor.segment = object.block.segment;
  descriptor.size = object.block.segment_size;
  descriptor.writable =
      object.spec.is_mutable || (object.pending && object.owner_session == session_id);
  // Duplicated under the lock: the segment (and its descriptors) may go as soon as it drops.
  descriptor.fd.reset(::fcntl(descriptor.writable ? object.block.read_write_fd
                                                  : object.block.read_only_fd,
                              F_DUPFD_CLOEXEC, 0));
  if (!descriptor.fd.valid()) return ErrnoStatus(errno, "duplicating a segment's descriptor");
  return descriptor;
}

absl::StatusOr<TensorGrant> TensorStore::Retain(const std::string& session_id,
                                                uint64_t lease_id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status s = CheckServing(); !s.ok()) return s;
  if (absl::Status s = CheckSession(session_id); !s.ok()) return s;
  auto object_id = leases_.ObjectOf(session_id, lease_id);
  if (!object_id.ok()) return object_id.status();
  TensorObject* object = objects_.at(*object_id).get();
  // Only the creator holds leases on a pending object, and its Create lease is writable.
  return GrantLocked(session_id, object, /*writable=*/object->pending || object->spec.is_mutable);
}

void TensorStore::ReleaseLeaseOnLocked(uint64_t object_id) {
  auto it = objects_.find(object_id);
  if (it == objects_.end()) return;
  --it->second->leases;
  MaybeFreeLocked(it->second.get());
}

absl::Status TensorStore::Delete(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status s = CheckServing(); !s.ok()) return s;
  auto it = published_.find(name);
  if (it == published_.end()) {
    if (pending_.count(name) > 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("name '", name, "' is not sealed yet; its creator can Abort it"));
    }
    return absl::NotFoundError(absl::StrCat("name '", name, "' is not published"));
  }
  TensorObject* object = objects_.at(it->second).get();
  published_.erase(it);
  object->published = false;
  MaybeFreeLocked(object);
  return absl::OkStatus();
}

void TensorStore::MaybeFreeLocked(TensorObject* object) {
  if (object->pending || object->published || object->leases > 0) return;
  std::vector<std::string> removed;
  PoolForLocked(object->block.device)->Free(object->block, &removed);
  objects_.erase(object->id);
  NotifySegmentsRemovedLocked(removed);
}

void TensorStore::NotifySegmentsRemovedLocked(const std::vector<std::string>& segments) {
  if (segments.empty()) return;
  for (auto& [id, session] : sessions_) {
    if (session.sink == nullptr) continue;
    for (const std::string& segment : segments) session.sink->OnSegmentRemoved(segment);
  }
}

std::vector<TensorInfo> TensorStore::List(const std::string& prefix) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<TensorInfo> views;
  for (auto it = published_.lower_bound(prefix);
       it != published_.end() && absl::StartsWith(it->first, prefix); ++it) {
    views.push_back(ViewLocked(*objects_.at(it->second)));
  }
  return views;
}

absl::StatusOr<TensorInfo> TensorStore::Stat(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = published_.find(name); it != published_.end()) {
    return ViewLocked(*objects_.at(it->second));
  }
  if (auto it = pending_.find(name); it != pending_.end()) {
    return ViewLocked(*objects_.at(it->second));
  }
  return absl::NotFoundError(absl::StrCat("name '", name, "' is not published"));
}

BrokerStats TensorStore::Stats() {
  std::lock_guard<std::mutex> lock(mu_);
  const PoolStats pool = pools_.front()->Stats();
  BrokerStats stats;
  for (const auto& each : pools_) {
    const PoolStats figures = each->Stats();
    stats.pools.push_back({each->device(), figures.capacity_bytes, figures.used_bytes,
                           figures.reserved_bytes, figures.segments});
  }
  stats.capacity_bytes = pool.capacity_bytes;
  stats.used_bytes = pool.used_bytes;
  stats.reserved_bytes = pool.reserved_bytes;
  stats.segments = pool.segments;
  stats.tensors = published_.size();
  stats.leases = leases_.size();
  stats.clients = sessions_.size();
  stats.pending = pending_.size();
  return stats;
}

void TensorStore::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutting_down_ = true;
  published_cv_.notify_all();
  AnswerWaitersLocked([](const Waiter&) { return true; },
                      [](const Waiter&) -> absl::StatusOr<TensorGrant> {
                        return absl::UnavailableError("tensorbrokerd is shutting down");
                      });
}

TensorInfo TensorStore::ViewLocked(const TensorObject& object) const {
  TensorInfo view;
  view.name = object.spec.name;
  view.dtype = object.spec.dtype;
  view.shape = object.spec.shape;
  view.strides = object.spec.strides;
  view.nbytes = object.spec.nbytes;
  view.device = object.block.device;
  view.sealed = object.sealed;
  view.is_mutable = object.spec.is_mutable;
  view.version = object.version;
  view.leases = object.leases;
  view.created_unix_ms = object.created_unix_ms;
  return view;
}

}  // namespace tensorbroker::daemon
