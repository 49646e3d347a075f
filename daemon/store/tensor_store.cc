#include "daemon/store/tensor_store.h"

#include <fcntl.h>

#include <cerrno>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "common/errno_status.h"
#include "common/mutex.h"
#include "common/stream_seats.h"
#include "common/tensor_layout.h"
#include "common/wire/proto_convert.h"
#include "daemon/base/log.h"

namespace tensorbroker::daemon {
namespace {

// 128 random bits: a session id is a bearer token, so it must not be guessable.
std::string NewSessionId() {
  std::random_device random;
  std::string id;
  for (int i = 0; i < 4; ++i) absl::StrAppend(&id, absl::Hex(random(), absl::kZeroPad8));
  return id;
}

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

absl::Status NotPublished(const std::string& name) {
  return absl::NotFoundError(absl::StrCat("name '", name, "' is not published"));
}

// Elements times item size, or nullopt on overflow.
std::optional<uint64_t> LogicalBytes(const TensorSpec& spec) {
  uint64_t bytes = ItemSize(spec.dtype);
  for (int64_t extent : spec.shape) {
    const uint64_t e = static_cast<uint64_t>(extent);
    if (e != 0 && bytes > UINT64_MAX / e) return std::nullopt;
    bytes *= e;
  }
  return bytes;
}

}  // namespace

absl::Status WaitRanOut(const std::string& name, const VersionWanted& wanted) {
  return absl::DeadlineExceededError(absl::StrCat(
      "name '", name, "' was not published",
      wanted.after_version.has_value() ? absl::StrCat(" after version ", *wanted.after_version)
                                       : "",
      " before the wait ran out"));
}

std::string SharingKeyOf(const TensorSpec& spec) {
  return absl::StrCat(spec.owner_uid, "/", spec.readers.Key());
}

// Holds the store's mutex for a call, and runs what the call deferred once it is released.
class ABSL_SCOPED_LOCKABLE TensorStore::Locked {
 public:
  explicit Locked(const TensorStore* store) ABSL_EXCLUSIVE_LOCK_FUNCTION(store->mu_)
      : store_(const_cast<TensorStore*>(store)), lock_(store->mu_) {}
  ~Locked() ABSL_UNLOCK_FUNCTION() {
    std::vector<std::function<void()>> run = std::move(store_->deferred_);
    store_->deferred_.clear();
    lock_.unlock();
    for (auto& callback : run) callback();
  }
  Locked(const Locked&) = delete;
  Locked& operator=(const Locked&) = delete;

 private:
  TensorStore* store_;
  MutexLock lock_;
};

TensorStore::TensorStore(std::unique_ptr<MemoryPool> cpu_pool, StoreOptions options)
    : TensorStore(OnePool(std::move(cpu_pool)), std::move(options)) {}

TensorStore::TensorStore(std::vector<std::unique_ptr<MemoryPool>> pools, StoreOptions options)
    : options_(std::move(options)),
      pools_(std::move(pools)),
      next_version_(std::max<uint64_t>(options_.first_version, 1)),
      watch_hub_(options_.watch_log) {
  // What came before this store's first version (a previous instance's) is unknown to its log.
  WatchHub::Wakes none;
  watch_hub_.Forget(next_version_ - 1, &none);
}

TensorStore::~TensorStore() {
  MutexLock lock(mu_);
  std::vector<std::string> removed;
  for (auto& [id, object] : objects_)
    PoolForLocked(object->block.device)->Free(object->block, &removed);
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

std::string TensorStore::OpenSession(const Principal& principal, int32_t pid,
                                     const std::string& client_name, SessionEventSink* sink) {
  Locked lock(this);
  std::string id = NewSessionId();
  sessions_[id] = Session{principal, pid, client_name, sink, {}, {}, {}};
  return id;
}

absl::Status TensorStore::CheckSessionUser(const std::string& session_id, uint32_t uid) const {
  Locked lock(this);
  if (absl::Status s = CheckSession(session_id); !s.ok()) return s;
  const uint32_t owner = sessions_.at(session_id).principal.uid;
  if (owner != uid) {
    return absl::PermissionDeniedError(
        absl::StrCat("session_id: the session belongs to another user (uid ", owner, ")"));
  }
  return absl::OkStatus();
}

void TensorStore::UpdateSessionHello(const std::string& session_id, int32_t pid,
                                     const std::string& client_name) {
  Locked lock(this);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return;
  it->second.pid = pid;
  it->second.client_name = client_name;
}

TensorStore::SessionCleanup TensorStore::CloseSession(const std::string& session_id) {
  Locked lock(this);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return {};
  const std::set<std::string> pending_names = std::move(it->second.pending_names);
  const std::map<std::string, uint64_t> ephemeral = std::move(it->second.ephemeral);
  sessions_.erase(it);
  // Its ephemeral names go first, while its leases still keep their objects known.
  for (const auto& [name, object_id] : ephemeral) {
    auto published = published_.find(name);
    if (published != published_.end() && published->second.current() == object_id) {
      DeleteNameLocked(published, "its ephemeral creator's session ended");
    }
  }
  AnswerWaitersLocked([&](const Waiter& w) -> std::optional<absl::StatusOr<TensorGrant>> {
    if (w.session_id != session_id) return std::nullopt;
    return absl::StatusOr<TensorGrant>(
        absl::FailedPreconditionError("session_id: the session closed while the Get waited"));
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

bool TensorStore::MayReadLocked(const Principal& caller, const TensorObject& object) const {
  return caller.admin || object.spec.owner_uid == caller.uid || object.spec.readers.Allows(caller);
}

TensorStore::TensorObject* TensorStore::VisibleLocked(const Principal& caller,
                                                      const std::string& name) {
  auto it = published_.find(name);
  if (it == published_.end()) return nullptr;
  TensorObject* object = objects_.at(it->second.current()).get();
  return MayReadLocked(caller, *object) ? object : nullptr;
}

TensorStore::TensorObject* TensorStore::ReadableLocked(const Principal& caller,
                                                       uint64_t object_id) const {
  TensorObject* object = objects_.at(object_id).get();
  return MayReadLocked(caller, *object) ? object : nullptr;
}

absl::StatusOr<TensorStore::TensorObject*> TensorStore::PickVersionLocked(
    const Principal& caller, const std::string& name, const VersionWanted& wanted) {
  auto entry = published_.find(name);
  if (wanted.version != 0) {
    if (entry != published_.end()) {
      auto it = entry->second.versions.find(wanted.version);
      if (it != entry->second.versions.end()) {
        if (TensorObject* object = ReadableLocked(caller, it->second)) return object;
      }
    }
    std::string kept;
    if (entry != published_.end()) {
      for (const auto& [version, object_id] : entry->second.versions) {
        if (ReadableLocked(caller, object_id) != nullptr)
          absl::StrAppend(&kept, kept.empty() ? "" : ", ", version);
      }
    }
    if (kept.empty()) return NotPublished(name);
    return absl::NotFoundError(absl::StrCat("version: name '", name, "' does not keep version ",
                                            wanted.version, " (it keeps ", kept, ")"));
  }
  if (entry == published_.end()) return nullptr;
  TensorObject* current = ReadableLocked(caller, entry->second.current());
  if (current == nullptr) return nullptr;
  if (!wanted.after_version.has_value()) return current;
  if (current->version <= *wanted.after_version) return nullptr;
  if (wanted.oldest) {
    const auto& versions = entry->second.versions;
    for (auto it = versions.upper_bound(*wanted.after_version); it != versions.end(); ++it) {
      if (TensorObject* object = ReadableLocked(caller, it->second)) return object;
    }
  }
  return current;
}

absl::Status TensorStore::CheckQuotaLocked(const TensorSpec& spec) const {
  if (!options_.quota_for) return absl::OkStatus();
  const Quota quota = options_.quota_for(spec.owner_uid);
  Usage usage;
  if (auto it = usage_.find(spec.owner_uid); it != usage_.end()) usage = it->second;
  auto in_use = [&] {
    return absl::StrCat(DescribeUid(spec.owner_uid), " holds ", FormatByteSize(usage.bytes), " in ",
                        usage.tensors, " tensor(s)");
  };
  if (quota.bytes != 0 && spec.nbytes > quota.bytes - std::min(quota.bytes, usage.bytes)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("quota-bytes: name '", spec.name, "' needs ", FormatByteSize(spec.nbytes),
                     "; ", in_use(), " of its quota of ", FormatByteSize(quota.bytes),
                     " (release or delete tensors, or ask for a larger quota)"));
  }
  if (quota.tensors != 0 && usage.tensors >= quota.tensors) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "quota-tensors: name '", spec.name, "': ", in_use(), ", its quota is ", quota.tensors,
        " tensor(s) (release or delete tensors, or ask for a larger quota)"));
  }
  return absl::OkStatus();
}

absl::Status TensorStore::CheckNameLocked(const Principal& caller, TensorSpec* spec) const {
  const std::optional<std::string> ring = RingOfSeat(spec->name);
  if (ring.has_value()) {
    auto published = published_.find(*ring);
    // The same answer whether the ring exists or not, to one who may not read it.
    if (published == published_.end() ||
        !MayReadLocked(caller, *objects_.at(published->second.current()))) {
      return absl::PermissionDeniedError(
          absl::StrCat("name '", spec->name, "' is a reader seat of the stream '", *ring,
                       "': only a process that may read '", *ring, "' may take one"));
    }
  }
  if (absl::Status s = CheckNameFreeLocked(caller, spec); !s.ok()) return s;
  if (ring.has_value() && !spec->ephemeral) {
    return absl::InvalidArgumentError(absl::StrCat("ephemeral: a reader seat ('", spec->name,
                                                   "') must be ephemeral (gone with its reader)"));
  }
  return absl::OkStatus();
}

absl::Status TensorStore::CheckNameFreeLocked(const Principal& caller, TensorSpec* spec) const {
  if (pending_.count(spec->name) > 0) {
    return absl::AlreadyExistsError(absl::StrCat(
        "name '", spec->name, "' is being created by another request and is not sealed yet"));
  }
  auto published = published_.find(spec->name);
  if (published == published_.end()) return absl::OkStatus();
  if (!spec->replace) {
    return absl::AlreadyExistsError(
        absl::StrCat("name '", spec->name, "' is already published (set replace to overwrite)"));
  }
  const uint32_t name_owner = published->second.owner_uid;
  if (!caller.admin && name_owner != caller.uid) {
    // The name is taken either way; whose it is stays unsaid to one who may not see it.
    const bool visible = MayReadLocked(caller, *objects_.at(published->second.current()));
    return absl::PermissionDeniedError(absl::StrCat(
        "name '", spec->name, "' belongs to ", visible ? DescribeUid(name_owner) : "another user",
        "; only its owner or an administrator may replace it"));
  }
  // An administrator's version of another user's name stays readable by the name's owner, who
  // may still replace or delete it: the owner joins its readers (and so its segment's key).
  if (name_owner != spec->owner_uid) spec->readers = spec->readers.WithUid(name_owner);
  return absl::OkStatus();
}

absl::StatusOr<TensorStore::TensorObject*> TensorStore::ReserveLocked(const std::string& owner,
                                                                      const Principal& caller,
                                                                      const TensorSpec& requested) {
  if (absl::Status s = CheckServing(); !s.ok()) return s;
  TensorSpec spec = requested;
  if (absl::Status s = CheckNameLocked(caller, &spec); !s.ok()) return s;
  MemoryPool* pool = PoolForLocked(spec.device);
  if (pool == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("device ", DeviceText(spec.device), " is not served by this tensorbrokerd",
                     spec.device.device_type == kDLCUDA ? " (--cuda-capacity is 0)" : ""));
  }
  // Strides may make a huge tensor out of a few bytes; whoever reads it compactly (Read,
  // numpy) would then make or stream all of it. Its logical size must fit in the pool. (A
  // tensor whose elements fit its buffer is only too large for the pool: RESOURCE_EXHAUSTED
  // from the allocation below, as for any capacity shortage.)
  const uint64_t capacity = pool->Stats().capacity_bytes;
  const std::optional<uint64_t> logical = LogicalBytes(spec);
  if (!logical.has_value() || (*logical > spec.nbytes && *logical > capacity)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shape: name '", spec.name, "' would hold ",
        logical.has_value() ? FormatByteSize(*logical) : std::string("more than 2^64 bytes"),
        " of elements, more than the capacity of ", FormatByteSize(capacity),
        " (whatever the strides)"));
  }
  if (absl::Status s = CheckQuotaLocked(spec); !s.ok()) return s;
  if (options_.may_make_tensor && !caller.admin) {
    if (absl::Status s = options_.may_make_tensor(); !s.ok()) return s;
  }
  std::vector<std::string> removed;
  auto block = pool->Allocate(spec.nbytes, BlockKindOf(spec), SharingKeyOf(spec), &removed);
  NotifySegmentsRemovedLocked(removed);
  if (!block.ok()) {
    return absl::Status(block.status().code(), absl::StrCat("name '", spec.name, "' (", spec.nbytes,
                                                            " bytes): ", block.status().message()));
  }
  auto object = std::make_unique<TensorObject>();
  object->id = next_object_id_++;
  object->spec = spec;
  object->block = *block;
  object->owner_session = owner;
  object->pending = true;
  object->created_unix_ms = absl::ToUnixMillis(absl::Now());
  object->pending_since = absl::Now();
  TensorObject* raw = object.get();
  objects_.emplace(raw->id, std::move(object));
  pending_.emplace(spec.name, raw->id);
  Usage& usage = usage_[spec.owner_uid];
  usage.bytes += spec.nbytes;
  ++usage.tensors;
  if (auto session = sessions_.find(owner); session != sessions_.end()) {
    session->second.pending_names.insert(spec.name);
    session->second.expired_names.erase(spec.name);
  }
  return raw;
}

absl::StatusOr<TensorGrant> TensorStore::Create(const std::string& session_id,
                                                const TensorSpec& spec) {
  Locked lock(this);
  if (absl::Status s = CheckSession(session_id); !s.ok()) return s;
  const Principal& caller = sessions_.at(session_id).principal;
  TensorSpec owned = spec;
  owned.owner_uid = caller.uid;
  auto object = ReserveLocked(session_id, caller, owned);
  if (!object.ok()) return object.status();
  return GrantLocked(session_id, *object, /*writable=*/true);
}

absl::StatusOr<TensorStore::TensorObject*> TensorStore::FindPendingLocked(
    const std::string& session_id, const std::string& name) {
  Session& session = sessions_.at(session_id);
  if (session.expired_names.erase(name) > 0) {
    return absl::DeadlineExceededError(absl::StrCat(
        "name '", name, "' was aborted: not sealed within the daemon's pending timeout (",
        absl::FormatDuration(options_.pending_timeout), ")"));
  }
  auto none = [&] {
    return absl::NotFoundError(
        absl::StrCat("name '", name, "' has no unsealed tensor (Create it first)"));
  };
  auto it = pending_.find(name);
  if (it == pending_.end()) {
    auto published = published_.find(name);
    if (published != published_.end() &&
        objects_.at(published->second.current())->owner_session == session_id) {
      return absl::FailedPreconditionError(absl::StrCat("name '", name, "' is already sealed"));
    }
    return none();
  }
  TensorObject* object = objects_.at(it->second).get();
  if (object->owner_session != session_id) {
    // Another user's pending tensor that this one may not read does not exist for it, as
    // through Stat and Get.
    if (object->spec.owner_uid != session.principal.uid &&
        !MayReadLocked(session.principal, *object)) {
      return none();
    }
    return absl::PermissionDeniedError(
        absl::StrCat("name '", name, "' is being created by another session"));
  }
  return object;
}

absl::StatusOr<TensorInfo> TensorStore::Seal(const std::string& session_id,
                                             const std::string& name) {
  Locked lock(this);
  // Nothing is published once shutting down: the state handed to a successor is final.
  if (absl::Status s = CheckServing(); !s.ok()) return s;
  if (absl::Status s = CheckSession(session_id); !s.ok()) return s;
  auto object = FindPendingLocked(session_id, name);
  if (!object.ok()) return object.status();
  Session& session = sessions_.at(session_id);
  session.pending_names.erase(name);
  if ((*object)->spec.ephemeral) session.ephemeral[name] = (*object)->id;
  return PublishLocked(*object, session.principal);
}

absl::Status TensorStore::Abort(const std::string& session_id, const std::string& name) {
  Locked lock(this);
  if (absl::Status s = CheckSession(session_id); !s.ok()) return s;
  auto object = FindPendingLocked(session_id, name);
  if (!object.ok()) return object.status();
  sessions_.at(session_id).pending_names.erase(name);
  DropPendingLocked(*object);
  return absl::OkStatus();
}

TensorInfo TensorStore::PublishLocked(TensorObject* object, const Principal& by) {
  const std::string& name = object->spec.name;
  pending_.erase(name);
  object->pending = false;
  object->sealed = true;
  object->version = next_version_++;
  auto [entry, first] = published_.try_emplace(name);
  uint64_t previous_version = 0;
  if (first) {
    entry->second.owner_uid = object->spec.owner_uid;
  } else {
    const TensorObject& previous = *objects_.at(entry->second.current());
    previous_version = previous.version;
    // Someone else's name (an administrator's act) at info; an owner's own replacement, which a
    // stream makes at every frame, at debug.
    const LogLevel level = by.uid == entry->second.owner_uid ? LogLevel::kDebug : LogLevel::kInfo;
    if (LogEnabled(level)) {  // spares the user-name lookups too
      Log(level, "'", LogSafe(name), "' replaced (version ", previous.version, " -> ",
          object->version, ", owner ", DescribeUid(entry->second.owner_uid), ") by ",
          DescribeUid(by.uid));
    }
  }
  entry->second.keep = object->spec.keep;
  entry->second.versions.emplace(object->version, object->id);
  object->published = true;
  // The new version is recorded before an old one's record goes: a kill in between leaves both,
  // and adoption keeps the newest `keep`.
  JournalPublishedLocked(*object);
  EmitLocked(first ? WatchEvent::Kind::kPublished : WatchEvent::Kind::kReplaced, *object,
             object->version, previous_version);
  while (entry->second.versions.size() > entry->second.keep) {
    const uint64_t oldest = entry->second.versions.begin()->first;
    // The version just replaced is told of by kReplaced; older ones leave the history.
    if (oldest != previous_version) {
      EmitLocked(WatchEvent::Kind::kExpired, *objects_.at(entry->second.versions.begin()->second),
                 0);
    }
    UnpublishLocked(&entry->second, oldest);
  }
  AnswerWaitersLocked([&](const Waiter& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(
                          mu_) -> std::optional<absl::StatusOr<TensorGrant>> {
    if (w.name != name) return std::nullopt;
    if (w.after_version.has_value() && object->version <= *w.after_version) return std::nullopt;
    auto session = sessions_.find(w.session_id);
    if (session == sessions_.end()) return absl::StatusOr<TensorGrant>(CheckSession(w.session_id));
    // A tensor the waiter may not read does not exist for it: it keeps waiting.
    if (!MayReadLocked(session->second.principal, *object)) return std::nullopt;
    return GrantLocked(w.session_id, object, object->spec.is_mutable);
  });
  return WithKeptVersionsLocked(by, ViewLocked(*object));
}

void TensorStore::EmitLocked(WatchEvent::Kind kind, const TensorObject& object, uint64_t sequence,
                             uint64_t previous_version) {
  WatchEntry entry;
  entry.event.kind = kind;
  entry.event.sequence = sequence != 0 ? sequence : next_version_++;
  entry.event.name = object.spec.name;
  entry.event.version = object.version;
  entry.event.previous_version = previous_version;
  entry.event.info = ViewLocked(object);
  entry.event.info.leases = 0;  // as at the event; a watcher asks Stat for the live count
  entry.publisher_uid = object.spec.owner_uid;
  entry.readers = object.spec.readers;
  watch_hub_.Append(std::move(entry), &deferred_);
}

namespace {

// Counts one more for `uid` when it has fewer than `most`; RESOURCE_EXHAUSTED naming `what`.
absl::Status CountIn(std::map<uint32_t, size_t>* counts, uint32_t uid, size_t most,
                     const char* what) {
  size_t& count = (*counts)[uid];
  if (count >= most) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, ": uid ", uid, " has ", most, " already (the most one user may have)"));
  }
  ++count;
  return absl::OkStatus();
}

void CountOff(std::map<uint32_t, size_t>* counts, uint32_t uid) {
  auto it = counts->find(uid);
  if (it == counts->end()) return;
  if (--it->second == 0) counts->erase(it);
}

}  // namespace

absl::StatusOr<uint64_t> TensorStore::Watch(const Principal& caller, std::string prefix,
                                            std::optional<uint64_t> after_version,
                                            std::function<void()> wake) {
  Locked lock(this);
  if (absl::Status s = CountIn(&watchers_per_uid_, caller.uid, kMaxWatchesPerUid, "watches");
      !s.ok()) {
    return s;
  }
  const uint64_t id =
      watch_hub_.Add(caller, std::move(prefix), after_version, next_version_ - 1, std::move(wake));
  watchers_[id] = caller.uid;
  return id;
}

absl::StatusOr<std::vector<WatchEvent>> TensorStore::TakeEvents(uint64_t watcher_id, size_t max) {
  return watch_hub_.Take(watcher_id, max);
}

void TensorStore::Unwatch(uint64_t watcher_id) {
  watch_hub_.Remove(watcher_id);
  Locked lock(this);
  auto it = watchers_.find(watcher_id);
  if (it == watchers_.end()) return;
  CountOff(&watchers_per_uid_, it->second);
  watchers_.erase(it);
}

void TensorStore::UnpublishLocked(PublishedName* entry, uint64_t version) {
  auto it = entry->versions.find(version);
  TensorObject* object = objects_.at(it->second).get();
  entry->versions.erase(it);
  object->published = false;
  JournalUnpublishedLocked(*object);
  MaybeFreeLocked(object);
}

void TensorStore::DropPendingLocked(TensorObject* object) {
  pending_.erase(object->spec.name);
  object->pending = false;
  MaybeFreeLocked(object);
}

absl::StatusOr<PutTicket> TensorStore::BeginPut(const Principal& caller, const TensorSpec& spec,
                                                std::function<void()> on_expired) {
  Locked lock(this);
  TensorSpec owned = spec;
  owned.owner_uid = caller.uid;
  auto object = ReserveLocked(kInternalSession, caller, owned);
  if (!object.ok()) return object.status();
  (*object)->on_expired = std::move(on_expired);
  // The Put's own lease keeps the bytes it writes to alive even if the timeout aborts it.
  const TensorGrant grant = GrantLocked(kInternalSession, *object, /*writable=*/true);
  return PutTicket{(*object)->id, (*object)->block.data, spec.nbytes, (*object)->block.device,
                   grant.lease_id};
}

absl::StatusOr<TensorInfo> TensorStore::CommitPut(const PutTicket& ticket) {
  Locked lock(this);
  auto it = objects_.find(ticket.object_id);
  absl::StatusOr<TensorInfo> result = absl::InternalError("put ticket is no longer pending");
  if (it != objects_.end() && it->second->expired) {
    result = absl::DeadlineExceededError(
        absl::StrCat("name '", it->second->spec.name,
                     "' was aborted: the Put did not finish within the "
                     "daemon's pending timeout (",
                     absl::FormatDuration(options_.pending_timeout), ")"));
  } else if (shutting_down_) {
    result = CheckServing();  // nothing is published once shutting down (see Seal)
  } else if (it != objects_.end() && it->second->pending) {
    it->second->on_expired = nullptr;
    const uint32_t uid = it->second->spec.owner_uid;
    result = PublishLocked(it->second.get(), Principal{uid, {}, false});
  }
  if (auto object_id = leases_.Remove(kInternalSession, ticket.lease_id); object_id.ok()) {
    ReleaseLeaseOnLocked(*object_id);
  }
  return result;
}

void TensorStore::CancelPut(const PutTicket& ticket) {
  Locked lock(this);
  auto it = objects_.find(ticket.object_id);
  if (it != objects_.end() && it->second->pending) {
    it->second->on_expired = nullptr;
    DropPendingLocked(it->second.get());
  }
  if (auto object_id = leases_.Remove(kInternalSession, ticket.lease_id); object_id.ok()) {
    ReleaseLeaseOnLocked(*object_id);
  }
}

absl::StatusOr<ReadTicket> TensorStore::BeginRead(const Principal& caller,
                                                  const std::string& name) {
  Locked lock(this);
  if (absl::Status s = CheckServing(); !s.ok()) return s;
  TensorObject* object = VisibleLocked(caller, name);
  if (object == nullptr) return NotPublished(name);
  if (absl::Status s = CountIn(&reads_per_uid_, caller.uid, kMaxReadsPerUid, "reads in progress");
      !s.ok()) {
    return s;
  }
  TensorGrant grant = GrantLocked(kInternalSession, object, /*writable=*/false);
  reads_[grant.lease_id] = caller.uid;
  return ReadTicket{std::move(grant.info), object->block.data, grant.lease_id};
}

void TensorStore::EndRead(uint64_t lease_id) {
  Locked lock(this);
  if (auto read = reads_.find(lease_id); read != reads_.end()) {
    CountOff(&reads_per_uid_, read->second);
    reads_.erase(read);
  }
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

std::optional<absl::StatusOr<TensorGrant>> TensorStore::TryGetLocked(const std::string& session_id,
                                                                     const std::string& name,
                                                                     const VersionWanted& wanted) {
  if (absl::Status s = CheckServing(); !s.ok()) return s;
  // The session may have closed while we waited: the lease would belong to no one.
  if (absl::Status s = CheckSession(session_id); !s.ok()) return s;
  absl::StatusOr<TensorObject*> object =
      PickVersionLocked(sessions_.at(session_id).principal, name, wanted);
  if (!object.ok()) return object.status();
  if (*object == nullptr) return std::nullopt;
  return GrantLocked(session_id, *object, /*writable=*/(*object)->spec.is_mutable);
}

namespace {

absl::Status CheckVersionWanted(const VersionWanted& wanted) {
  if (wanted.version != 0 && wanted.after_version.has_value()) {
    return absl::InvalidArgumentError(
        "version: give either a version or an after_version, not both");
  }
  if (wanted.oldest && !wanted.after_version.has_value()) {
    return absl::InvalidArgumentError("oldest: needs an after_version");
  }
  return absl::OkStatus();
}

absl::Status NothingNewer(const std::string& name, const VersionWanted& wanted) {
  if (!wanted.after_version.has_value()) return NotPublished(name);
  return absl::NotFoundError(
      absl::StrCat("name '", name, "' has no version after ", *wanted.after_version));
}

}  // namespace

std::optional<absl::StatusOr<TensorGrant>> TensorStore::GetOrWait(
    const std::string& session_id, const std::string& name, const VersionWanted& wanted,
    absl::Time deadline, uint64_t* waiter_id, GetCallback on_ready) {
  if (absl::Status s = CheckVersionWanted(wanted); !s.ok()) return absl::StatusOr<TensorGrant>(s);
  Locked lock(this);
  if (auto now = TryGetLocked(session_id, name, wanted); now.has_value()) return now;
  if (absl::Now() >= deadline) return absl::StatusOr<TensorGrant>(NothingNewer(name, wanted));
  const uint32_t uid = sessions_.at(session_id).principal.uid;  // TryGetLocked checked it
  if (absl::Status s = CountIn(&waiters_per_uid_, uid, kMaxWaitingGetsPerUid, "waiting Gets");
      !s.ok()) {
    return absl::StatusOr<TensorGrant>(s);
  }
  *waiter_id = next_waiter_id_++;
  waiters_.emplace(*waiter_id,
                   Waiter{uid, session_id, name, wanted.after_version, std::move(on_ready)});
  return std::nullopt;
}

bool TensorStore::CancelWait(uint64_t waiter_id) {
  Locked lock(this);
  auto it = waiters_.find(waiter_id);
  if (it == waiters_.end()) return false;
  EraseWaiterLocked(it);
  return true;
}

std::map<uint64_t, TensorStore::Waiter>::iterator TensorStore::EraseWaiterLocked(
    std::map<uint64_t, Waiter>::iterator it) {
  CountOff(&waiters_per_uid_, it->second.uid);
  return waiters_.erase(it);
}

void TensorStore::AnswerWaitersLocked(
    const std::function<std::optional<absl::StatusOr<TensorGrant>>(const Waiter&)>& answer) {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    std::optional<absl::StatusOr<TensorGrant>> result = answer(it->second);
    if (!result.has_value()) {
      ++it;
      continue;
    }
    deferred_.push_back([on_ready = std::move(it->second.on_ready),
                         result = *std::move(result)]() mutable { on_ready(std::move(result)); });
    it = EraseWaiterLocked(it);
  }
}

absl::StatusOr<TensorGrant> TensorStore::Get(const std::string& session_id, const std::string& name,
                                             absl::Time deadline, const VersionWanted& wanted) {
  struct Answer {
    Mutex mu;
    CondVar ready;
    std::optional<absl::StatusOr<TensorGrant>> result;
  };
  auto answer = std::make_shared<Answer>();
  uint64_t waiter_id = 0;
  auto now = GetOrWait(session_id, name, wanted, deadline, &waiter_id,
                       [answer](absl::StatusOr<TensorGrant> result) {
                         MutexLock lock(answer->mu);
                         answer->result = std::move(result);
                         answer->ready.notify_all();
                       });
  if (now.has_value()) return *std::move(now);
  MutexLock lock(answer->mu);
  if (!answer->ready.wait_until(lock, absl::ToChronoTime(deadline),
                                [&] { return answer->result.has_value(); })) {
    lock.unlock();
    if (CancelWait(waiter_id)) return WaitRanOut(name, wanted);
    lock.lock();  // answered meanwhile: its callback is about to run
    answer->ready.wait(lock, [&] { return answer->result.has_value(); });
  }
  return *std::move(answer->result);
}

absl::Status TensorStore::Release(const std::string& session_id, uint64_t lease_id) {
  Locked lock(this);
  if (absl::Status s = CheckSession(session_id); !s.ok()) return s;
  auto object_id = leases_.Remove(session_id, lease_id);
  if (!object_id.ok()) return object_id.status();
  ReleaseLeaseOnLocked(*object_id);
  return absl::OkStatus();
}

absl::StatusOr<SegmentDescriptor> TensorStore::DescribeSegment(const std::string& session_id,
                                                               uint64_t lease_id) {
  Locked lock(this);
  return SegmentOfLocked(session_id, lease_id);
}

absl::StatusOr<SegmentDescriptor> TensorStore::DescriptorFor(const std::string& session_id,
                                                             uint64_t lease_id) {
  Locked lock(this);
  auto descriptor = SegmentOfLocked(session_id, lease_id);
  if (!descriptor.ok()) return descriptor.status();
  const Block& block = objects_.at(*leases_.ObjectOf(session_id, lease_id))->block;
  // Duplicated under the lock: the segment (and its descriptors) may go as soon as it drops.
  descriptor->fd.reset(
      ::fcntl(descriptor->writable ? block.read_write_fd : block.read_only_fd, F_DUPFD_CLOEXEC, 0));
  if (!descriptor->fd.valid()) return ErrnoStatus(errno, "duplicating a segment's descriptor");
  return descriptor;
}

absl::StatusOr<SegmentDescriptor> TensorStore::SegmentOfLocked(const std::string& session_id,
                                                               uint64_t lease_id) {
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
  return descriptor;
}

absl::StatusOr<TensorGrant> TensorStore::Retain(const std::string& session_id, uint64_t lease_id) {
  Locked lock(this);
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

absl::Status TensorStore::Delete(const Principal& caller, const std::string& name) {
  Locked lock(this);
  if (absl::Status s = CheckServing(); !s.ok()) return s;
  TensorObject* object = VisibleLocked(caller, name);
  if (object == nullptr) {
    if (auto pending = pending_.find(name);
        pending != pending_.end() && MayReadLocked(caller, *objects_.at(pending->second))) {
      return absl::FailedPreconditionError(
          absl::StrCat("name '", name, "' is not sealed yet; its creator can Abort it"));
    }
    return NotPublished(name);
  }
  auto it = published_.find(name);
  const uint32_t owner = it->second.owner_uid;
  if (!caller.admin && owner != caller.uid) {
    return absl::PermissionDeniedError(
        absl::StrCat("name '", name, "' belongs to ", DescribeUid(owner),
                     "; only its owner or an administrator may delete it"));
  }
  DeleteNameLocked(it, absl::StrCat("by ", DescribeUid(caller.uid)));
  return absl::OkStatus();
}

void TensorStore::DeleteNameLocked(std::map<std::string, PublishedName>::iterator it,
                                   const std::string& why) {
  const TensorObject& object = *objects_.at(it->second.current());
  const size_t older = it->second.versions.size() - 1;
  EmitLocked(WatchEvent::Kind::kDeleted, object, 0);
  Log(LogLevel::kInfo, "'", LogSafe(it->first), "' deleted (version ", object.version, ", owner ",
      DescribeUid(it->second.owner_uid),
      older == 0 ? std::string() : absl::StrCat(", and ", older, " older kept version(s)"), ") ",
      why);
  while (!it->second.versions.empty()) {
    UnpublishLocked(&it->second, it->second.versions.begin()->first);
  }
  published_.erase(it);
}

absl::Status TensorStore::AdoptPublished(AdoptedTensor tensor) {
  Locked lock(this);
  const std::string name = tensor.spec.name;
  auto existing = published_.find(name);
  if (pending_.count(name) != 0 ||
      (existing != published_.end() && (existing->second.owner_uid != tensor.name_owner ||
                                        existing->second.versions.count(tensor.version) != 0))) {
    return absl::AlreadyExistsError(absl::StrCat("name '", name, "' is taken"));
  }
  auto object = std::make_unique<TensorObject>();
  object->id = next_object_id_++;
  object->spec = std::move(tensor.spec);
  object->block = std::move(tensor.block);
  object->published = true;
  object->sealed = true;
  object->version = tensor.version;
  object->created_unix_ms = tensor.created_unix_ms;
  Usage& usage = usage_[object->spec.owner_uid];
  usage.bytes += object->spec.nbytes;
  ++usage.tensors;
  next_version_ = std::max(next_version_, tensor.version + 1);
  watch_hub_.Forget(next_version_ - 1, &deferred_);  // the previous instance's events are gone
  PublishedName& entry = published_[name];
  entry.owner_uid = tensor.name_owner;
  entry.versions.emplace(tensor.version, object->id);
  // The name keeps what its newest version asked for.
  if (entry.versions.rbegin()->first == tensor.version) entry.keep = object->spec.keep;
  objects_.emplace(object->id, std::move(object));
  return absl::OkStatus();
}

void TensorStore::EndAdoptionGrace() {
  Locked lock(this);
  for (auto& pool : pools_) pool->EndAdoptionGrace();
}

void TensorStore::ExportState(PersistenceJournal* journal) {
  Locked lock(this);
  for (auto& pool : pools_) pool->ReplaySegments(journal);
  for (const auto& [name, published] : published_) {
    for (const auto& [version, object_id] : published.versions) {
      auto it = objects_.find(object_id);
      if (it != objects_.end()) JournalPublishedLocked(*it->second, journal);
    }
  }
}

void TensorStore::JournalPublishedLocked(const TensorObject& object, PersistenceJournal* journal) {
  if (journal == nullptr) journal = options_.journal;
  // An ephemeral tensor ends with its session, so never outlives this instance.
  if (journal == nullptr || object.block.device.device_type != kDLCPU || object.spec.ephemeral) {
    return;
  }
  v1::TensorRecord record;
  TensorInfo info = ViewLocked(object);
  info.leases = 0;  // leases end with the instance
  ToProto(info, record.mutable_info());
  record.set_publisher_uid(object.spec.owner_uid);
  record.set_segment(object.block.segment);
  record.set_offset(object.block.offset);
  record.set_block_size(object.block.size);
  journal->TensorPublished(record);
}

void TensorStore::JournalUnpublishedLocked(const TensorObject& object) {
  if (options_.journal == nullptr || object.block.device.device_type != kDLCPU ||
      object.spec.ephemeral) {
    return;
  }
  options_.journal->TensorUnpublished(object.version);
}

void TensorStore::MaybeFreeLocked(TensorObject* object) {
  if (object->pending || object->published || object->leases > 0) return;
  std::vector<std::string> removed;
  PoolForLocked(object->block.device)->Free(object->block, &removed);
  auto usage = usage_.find(object->spec.owner_uid);
  usage->second.bytes -= object->spec.nbytes;
  if (--usage->second.tensors == 0) usage_.erase(usage);
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

ListPage TensorStore::List(const Principal& caller, const std::string& prefix, size_t page_size,
                           const std::string& page_token) {
  Locked lock(this);
  ListPage page;
  // The token is the last name of the previous page: this one starts after it.
  auto it =
      page_token < prefix ? published_.lower_bound(prefix) : published_.upper_bound(page_token);
  for (; it != published_.end() && absl::StartsWith(it->first, prefix); ++it) {
    const TensorObject& object = *objects_.at(it->second.current());
    if (!MayReadLocked(caller, object)) continue;
    if (page.tensors.size() == page_size) {
      page.next_page_token = page.tensors.back().name;
      break;
    }
    page.tensors.push_back(WithKeptVersionsLocked(caller, ViewLocked(object)));
  }
  return page;
}

absl::StatusOr<TensorInfo> TensorStore::Stat(const Principal& caller, const std::string& name) {
  Locked lock(this);
  if (const TensorObject* object = VisibleLocked(caller, name); object != nullptr) {
    return WithKeptVersionsLocked(caller, ViewLocked(*object));
  }
  if (auto it = pending_.find(name); it != pending_.end()) {
    const TensorObject& object = *objects_.at(it->second);
    if (MayReadLocked(caller, object)) return ViewLocked(object);
  }
  return NotPublished(name);
}

BrokerStats TensorStore::Stats(const Principal& caller) {
  Locked lock(this);
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
  if (caller.admin) {
    stats.tensors = published_.size();
  } else {
    for (const auto& [name, entry] : published_) {
      stats.tensors += MayReadLocked(caller, *objects_.at(entry.current())) ? 1 : 0;
    }
  }
  stats.leases = leases_.size();
  stats.clients = sessions_.size();
  stats.pending = pending_.size();
  stats.waiting_gets = waiters_.size();
  stats.watchers = watch_hub_.watchers();
  auto add_user = [&](uint32_t uid, const Usage& usage) {
    UserUsage row;
    row.uid = uid;
    row.bytes = usage.bytes;
    row.tensors = usage.tensors;
    if (options_.quota_for) {
      const Quota quota = options_.quota_for(uid);
      row.quota_bytes = quota.bytes;
      row.quota_tensors = quota.tensors;
    }
    stats.users.push_back(row);
  };
  if (caller.admin) {
    for (const auto& [uid, usage] : usage_) add_user(uid, usage);
  } else {
    auto own = usage_.find(caller.uid);
    add_user(caller.uid, own == usage_.end() ? Usage{} : own->second);
  }
  return stats;
}

size_t TensorStore::ExpirePending(absl::Time now) {
  Locked lock(this);
  std::vector<TensorObject*> expired;
  for (const auto& [name, object_id] : pending_) {
    TensorObject* object = objects_.at(object_id).get();
    if (now - object->pending_since >= options_.pending_timeout) expired.push_back(object);
  }
  for (TensorObject* object : expired) {
    const std::string name = object->spec.name;
    Log(LogLevel::kWarning, "'", LogSafe(name),
        "' aborted: ", object->owner_session.empty() ? "its Put did not finish" : "not sealed",
        " within the pending timeout (", absl::FormatDuration(options_.pending_timeout),
        "); owner ", DescribeUid(object->spec.owner_uid),
        SessionDescriptionLocked(object->owner_session), "; the name is free again");
    if (auto session = sessions_.find(object->owner_session); session != sessions_.end()) {
      session->second.pending_names.erase(name);
      // Reported at the creator's next Seal or Abort; bounded by what it had pending.
      session->second.expired_names.insert(name);
    }
    object->expired = true;
    if (object->on_expired) deferred_.push_back(std::move(object->on_expired));
    object->on_expired = nullptr;
    DropPendingLocked(object);
  }
  return expired.size();
}

std::string TensorStore::SessionDescriptionLocked(const std::string& session_id) const {
  auto session = sessions_.find(session_id);
  if (session == sessions_.end()) return "";
  return absl::StrCat(" pid ", session->second.pid, session->second.client_name.empty() ? "" : " (",
                      LogSafe(session->second.client_name),
                      session->second.client_name.empty() ? "" : ")");
}

void TensorStore::Shutdown() {
  Locked lock(this);
  shutting_down_ = true;
  watch_hub_.Shutdown(&deferred_);
  AnswerWaitersLocked([](const Waiter&) -> std::optional<absl::StatusOr<TensorGrant>> {
    return absl::StatusOr<TensorGrant>(absl::UnavailableError("tensorbrokerd is shutting down"));
  });
}

TensorInfo TensorStore::WithKeptVersionsLocked(const Principal& caller, TensorInfo info) const {
  if (auto name = published_.find(info.name); name != published_.end()) {
    for (const auto& [version, object_id] : name->second.versions) {
      if (MayReadLocked(caller, *objects_.at(object_id))) info.kept_versions.push_back(version);
    }
  }
  return info;
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
  auto name = published_.find(object.spec.name);
  const bool named = name != published_.end() && object.published &&
                     name->second.versions.count(object.version) != 0;
  view.owner_uid = named ? name->second.owner_uid : object.spec.owner_uid;
  view.keep = named ? name->second.keep : object.spec.keep;
  view.readers = object.spec.readers.Entries();
  view.ephemeral = object.spec.ephemeral;
  return view;
}

}  // namespace tensorbroker::daemon
