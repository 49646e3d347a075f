#include "daemon/store/tensor_store.h"

#include <fcntl.h>

#include <cerrno>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "common/errno_status.h"
#include "common/mutex.h"
#include "common/stream_seats.h"
#include "common/tensor_layout.h"
#include "daemon/base/log.h"
#include "daemon/store/store_lock.h"

namespace tensorbroker::daemon {
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

// Whether a tensor in `block` can outlive this instance: CPU segments and CUDA VMM slabs (their
// descriptors are kept), not legacy CUDA IPC slabs; an ephemeral one ends with its session.
bool Survives(const Block& block, const TensorSpec& spec) {
  return !spec.ephemeral && !spec.origin.has_value() &&
         (block.device.device_type == kDLCPU || block.read_write_fd >= 0);
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

TensorStore::TensorStore(std::unique_ptr<MemoryPool> cpu_pool, StoreOptions options)
    : TensorStore(OnePool(std::move(cpu_pool)), std::move(options)) {}

TensorStore::TensorStore(std::vector<std::unique_ptr<MemoryPool>> pools, StoreOptions options)
    : options_(std::move(options)),
      pools_(std::move(pools)),
      ledger_(options_.quota_for, {kMaxReadsPerUid, kMaxWatchesPerUid}),
      waiters_(kMaxWaitingGetsPerUid),
      slot_tables_(options_.max_lease_tables_per_uid),
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
  return sessions_.Open(principal, pid, client_name, sink);
}

absl::Status TensorStore::CheckSessionUser(const std::string& session_id, uint32_t uid) const {
  Locked lock(this);
  return sessions_.CheckUser(session_id, uid);
}

void TensorStore::UpdateSessionHello(const std::string& session_id, int32_t pid,
                                     const std::string& client_name) {
  Locked lock(this);
  sessions_.UpdateHello(session_id, pid, client_name);
}

TensorStore::SessionCleanup TensorStore::CloseSession(const std::string& session_id) {
  Locked lock(this);
  std::optional<SessionTable::Session> closed = sessions_.Close(session_id);
  if (!closed.has_value()) return {};
  const std::set<std::string>& pending_names = closed->pending_names;
  // Its ephemeral names go first, while its leases still keep their objects known.
  for (const auto& [name, object_id] : closed->ephemeral) {
    const NameIndex::Published* published = names_.Find(name);
    if (published != nullptr && published->current() == object_id) {
      DeleteNameLocked(name, "its ephemeral creator's session ended");
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
  // Its lease table pins nothing from now on (the process may still be writing to it).
  directories_.Close(session_id);
  if (slot_tables_.Close(session_id)) ForgetTableLocked(session_id);
  for (const std::string& name : pending_names) {
    const std::optional<uint64_t> pending = names_.PendingObject(name);
    if (!pending.has_value()) continue;
    DropPendingLocked(objects_.at(*pending).get());
  }
  cleanup.pending_aborted = pending_names.size();
  return cleanup;
}

absl::Status TensorStore::CheckServing() const {
  if (shutting_down_) return absl::UnavailableError("tensorbrokerd is shutting down");
  return absl::OkStatus();
}

bool SpecAllows(const Principal& principal, const TensorSpec& spec) {
  return principal.admin || spec.owner_uid == principal.uid || spec.readers.Allows(principal);
}

bool TensorStore::MayReadLocked(const Principal& caller, const TensorObject& object) const {
  return SpecAllows(caller, object.spec);
}

TensorStore::TensorObject* TensorStore::VisibleLocked(const Principal& caller,
                                                      const std::string& name) {
  const NameIndex::Published* entry = names_.Find(name);
  if (entry == nullptr) return nullptr;
  TensorObject* object = objects_.at(entry->current()).get();
  return MayReadLocked(caller, *object) ? object : nullptr;
}

TensorStore::TensorObject* TensorStore::ReadableLocked(const Principal& caller,
                                                       uint64_t object_id) const {
  TensorObject* object = objects_.at(object_id).get();
  return MayReadLocked(caller, *object) ? object : nullptr;
}

absl::StatusOr<TensorStore::TensorObject*> TensorStore::PickVersionLocked(
    const Principal& caller, const std::string& name, const VersionWanted& wanted) {
  const NameIndex::Published* entry = names_.Find(name);
  if (wanted.version != 0) {
    if (entry != nullptr) {
      auto it = entry->versions.find(wanted.version);
      if (it != entry->versions.end()) {
        if (TensorObject* object = ReadableLocked(caller, it->second)) return object;
      }
    }
    std::string kept;
    if (entry != nullptr) {
      for (const auto& [version, object_id] : entry->versions) {
        if (ReadableLocked(caller, object_id) != nullptr)
          absl::StrAppend(&kept, kept.empty() ? "" : ", ", version);
      }
    }
    if (kept.empty()) return NotPublished(name);
    return absl::NotFoundError(absl::StrCat("version: name '", name, "' does not keep version ",
                                            wanted.version, " (it keeps ", kept, ")"));
  }
  if (entry == nullptr) return nullptr;
  TensorObject* current = ReadableLocked(caller, entry->current());
  if (current == nullptr) return nullptr;
  if (!wanted.after_version.has_value()) return current;
  if (current->version <= *wanted.after_version) return nullptr;
  if (wanted.oldest) {
    const auto& versions = entry->versions;
    for (auto it = versions.upper_bound(*wanted.after_version); it != versions.end(); ++it) {
      if (TensorObject* object = ReadableLocked(caller, it->second)) return object;
    }
  }
  return current;
}

absl::Status TensorStore::CheckNameLocked(const Principal& caller, TensorSpec* spec) const {
  const std::optional<std::string> ring = RingOfSeat(spec->name);
  if (ring.has_value()) {
    const NameIndex::Published* published = names_.Find(*ring);
    // The same answer whether the ring exists or not, to one who may not read it.
    if (published == nullptr || !MayReadLocked(caller, *objects_.at(published->current()))) {
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
  if (names_.IsPending(spec->name)) {
    return absl::AlreadyExistsError(absl::StrCat(
        "name '", spec->name, "' is being created by another request and is not sealed yet"));
  }
  const NameIndex::Published* published = names_.Find(spec->name);
  if (published == nullptr) return absl::OkStatus();
  if (!spec->replace) {
    return absl::AlreadyExistsError(
        absl::StrCat("name '", spec->name, "' is already published (set replace to overwrite)"));
  }
  const uint32_t name_owner = published->owner_uid;
  if (!caller.admin && name_owner != caller.uid) {
    // The name is taken either way; whose it is stays unsaid to one who may not see it.
    const bool visible = MayReadLocked(caller, *objects_.at(published->current()));
    return absl::PermissionDeniedError(absl::StrCat(
        "name '", spec->name, "' belongs to ", visible ? DescribeUid(name_owner) : "another user",
        "; only its owner or an administrator may replace it"));
  }
  // An administrator's version of another user's name stays readable by the name's owner, who
  // may still replace or delete it: the owner joins its readers (and so its segment's key).
  if (name_owner != spec->owner_uid) spec->readers = spec->readers.WithUid(name_owner);
  return absl::OkStatus();
}

absl::StatusOr<Block> TensorStore::AllocateLocked(MemoryPool& pool, const TensorSpec& spec,
                                                  std::vector<std::string>* removed) {
  auto allocate = [&] {
    return pool.Allocate(spec.nbytes, BlockKindOf(spec), SharingKeyOf(spec), removed);
  };
  absl::StatusOr<Block> block = allocate();
  // Short of room: versions lease tables no longer name go first, then replicas no one holds,
  // least recently leased first, and those only when evicting all that may go would make room
  // (one that cannot help empties no cache).
  if (!block.ok() && absl::IsResourceExhausted(block.status()) && !slot_pinned_.empty()) {
    ReclaimSlotPinnedLocked();
    block = allocate();
  }
  if (!block.ok() && absl::IsResourceExhausted(block.status()) &&
      EvictionCouldMakeRoomLocked(pool, spec.nbytes)) {
    while (!block.ok() && absl::IsResourceExhausted(block.status()) &&
           EvictReplicaLocked(spec.device)) {
      block = allocate();
    }
  }
  return block;
}

absl::StatusOr<TensorStore::TensorObject*> TensorStore::ReserveLocked(const std::string& owner,
                                                                      const Principal& caller,
                                                                      const TensorSpec& requested) {
  if (absl::Status s = CheckServing(); !s.ok()) return s;
  TensorSpec spec = requested;
  if (options_.remote != nullptr && !spec.origin.has_value()) {
    if (std::optional<std::string> peer = options_.remote->PeerFor(spec.name); peer.has_value()) {
      return absl::FailedPreconditionError(
          absl::StrCat("name '", spec.name, "' is served by peer ", *peer,
                       " (remote[...] in this broker's settings): publish it there"));
    }
  }
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
  const bool charged = !spec.origin.has_value();  // a replica is no user's
  if (absl::Status s =
          charged ? ledger_.CheckRoom(spec.owner_uid, spec.name, spec.nbytes) : absl::OkStatus();
      !s.ok()) {
    return s;
  }
  if (options_.descriptors_to_spare && !caller.admin) {
    if (absl::Status s = options_.descriptors_to_spare("name"); !s.ok()) return s;
  }
  absl::StatusOr<uint64_t> token = NewPinTokenLocked();
  if (!token.ok()) return token.status();
  std::vector<std::string> removed;
  absl::StatusOr<Block> block = AllocateLocked(*pool, spec, &removed);
  sessions_.NotifySegmentsRemoved(removed);
  if (!block.ok()) {
    return absl::Status(block.status().code(), absl::StrCat("name '", spec.name, "' (", spec.nbytes,
                                                            " bytes): ", block.status().message()));
  }
  auto object = std::make_unique<TensorObject>();
  object->id = next_object_id_++;
  object->pin_token = *token;
  object->spec = spec;
  object->block = *block;
  object->owner_session = owner;
  object->pending = true;
  object->created_unix_ms = absl::ToUnixMillis(absl::Now());
  object->pending_since = absl::Now();
  TensorObject* raw = object.get();
  objects_.emplace(raw->id, std::move(object));
  pin_tokens_.emplace(raw->pin_token, raw->id);
  names_.AddPending(spec.name, raw->id);
  if (charged) ledger_.Charge(spec.owner_uid, spec.nbytes);
  sessions_.AddPending(owner, spec.name);
  return raw;
}

absl::StatusOr<TensorGrant> TensorStore::Create(const std::string& session_id,
                                                const TensorSpec& spec) {
  Locked lock(this);
  if (absl::Status s = sessions_.Check(session_id); !s.ok()) return s;
  const Principal& caller = sessions_.PrincipalOf(session_id);
  TensorSpec owned = spec;
  owned.owner_uid = caller.uid;
  auto object = ReserveLocked(session_id, caller, owned);
  if (!object.ok()) return object.status();
  return GrantLocked(session_id, *object, /*writable=*/true);
}

absl::StatusOr<TensorStore::TensorObject*> TensorStore::FindPendingLocked(
    const std::string& session_id, const std::string& name) {
  if (sessions_.TakeExpired(session_id, name)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "name '", name, "' was aborted: not sealed within the daemon's pending timeout (",
        absl::FormatDuration(options_.pending_timeout), ")"));
  }
  auto none = [&] {
    return absl::NotFoundError(
        absl::StrCat("name '", name, "' has no unsealed tensor (Create it first)"));
  };
  const std::optional<uint64_t> pending = names_.PendingObject(name);
  if (!pending.has_value()) {
    const NameIndex::Published* published = names_.Find(name);
    if (published != nullptr && objects_.at(published->current())->owner_session == session_id) {
      return absl::FailedPreconditionError(absl::StrCat("name '", name, "' is already sealed"));
    }
    return none();
  }
  TensorObject* object = objects_.at(*pending).get();
  if (object->owner_session != session_id) {
    // Another user's pending tensor that this one may not read does not exist for it, as
    // through Stat and Get.
    const Principal& principal = sessions_.PrincipalOf(session_id);
    if (object->spec.owner_uid != principal.uid && !MayReadLocked(principal, *object)) {
      return none();
    }
    return absl::PermissionDeniedError(
        absl::StrCat("name '", name, "' is being created by another session"));
  }
  return object;
}

absl::StatusOr<TensorView> TensorStore::Seal(const std::string& session_id,
                                             const std::string& name) {
  Locked lock(this);
  // Nothing is published once shutting down: the state handed to a successor is final.
  if (absl::Status s = CheckServing(); !s.ok()) return s;
  if (absl::Status s = sessions_.Check(session_id); !s.ok()) return s;
  auto object = FindPendingLocked(session_id, name);
  if (!object.ok()) return object.status();
  sessions_.EndPending(session_id, name);
  if ((*object)->spec.ephemeral) sessions_.AddEphemeral(session_id, name, (*object)->id);
  return PublishLocked(*object, sessions_.PrincipalOf(session_id));
}

absl::Status TensorStore::Abort(const std::string& session_id, const std::string& name) {
  Locked lock(this);
  if (absl::Status s = sessions_.Check(session_id); !s.ok()) return s;
  auto object = FindPendingLocked(session_id, name);
  if (!object.ok()) return object.status();
  sessions_.EndPending(session_id, name);
  DropPendingLocked(*object);
  return absl::OkStatus();
}

TensorView TensorStore::PublishLocked(TensorObject* object, const Principal& by) {
  const std::string& name = object->spec.name;
  names_.ErasePending(name);
  object->pending = false;
  object->sealed = true;
  object->version = next_version_++;
  const uint64_t previous_id =
      names_.Publish(name, object->spec.owner_uid, object->spec.keep, object->version, object->id);
  NameIndex::Published& entry = *names_.Find(name);
  const bool first = previous_id == 0;
  uint64_t previous_version = 0;
  if (!first) {
    const TensorObject& previous = *objects_.at(previous_id);
    previous_version = previous.version;
    // Someone else's name (an administrator's act) at info; an owner's own replacement, which a
    // stream makes at every frame, at debug.
    const LogLevel level = by.uid == entry.owner_uid ? LogLevel::kDebug : LogLevel::kInfo;
    if (LogEnabled(level)) {  // spares the user-name lookups too
      Log(level, "'", LogSafe(name), "' replaced (version ", previous.version, " -> ",
          object->version, ", owner ", DescribeUid(entry.owner_uid), ") by ", DescribeUid(by.uid));
    }
  }
  object->published = true;
  // The new version is recorded before an old one's record goes: a kill in between leaves both,
  // and adoption keeps the newest `keep`.
  JournalPublishedLocked(*object);
  EmitLocked(first ? StoreEvent::Kind::kPublished : StoreEvent::Kind::kReplaced, *object,
             object->version, previous_version);
  while (entry.versions.size() > entry.keep) {
    const uint64_t oldest = entry.versions.begin()->first;
    // The version just replaced is told of by kReplaced; older ones leave the history.
    if (oldest != previous_version) {
      EmitLocked(StoreEvent::Kind::kExpired, *objects_.at(entry.versions.begin()->second), 0);
    }
    UnpublishLocked(name, oldest);
  }
  AnswerWaitersLocked([&](const Waiter& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(
                          mu_) -> std::optional<absl::StatusOr<TensorGrant>> {
    if (w.name != name) return std::nullopt;
    if (w.after_version.has_value() && object->version <= *w.after_version) return std::nullopt;
    if (absl::Status s = sessions_.Check(w.session_id); !s.ok()) {
      return absl::StatusOr<TensorGrant>(s);
    }
    // A tensor the waiter may not read does not exist for it: it keeps waiting, unless it waits
    // for this fetch alone (the peer's answer is all there will be: not there for it).
    if (!MayReadLocked(sessions_.PrincipalOf(w.session_id), *object)) {
      if (w.for_fetch && object->spec.origin.has_value()) {
        return absl::StatusOr<TensorGrant>(NotPublished(name));
      }
      return std::nullopt;
    }
    return GrantLocked(w.session_id, object, object->spec.is_mutable);
  });
  return WithKeptVersionsLocked(by, ViewLocked(*object));
}

void TensorStore::EmitLocked(StoreEvent::Kind kind, const TensorObject& object, uint64_t sequence,
                             uint64_t previous_version) {
  // The directories first: no waiter or watcher hears of a version they do not show yet.
  UpdateDirectoriesLocked(kind, object);
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

absl::StatusOr<uint64_t> TensorStore::Watch(const Principal& caller, std::string prefix,
                                            std::optional<uint64_t> after_version,
                                            std::function<void()> wake) {
  Locked lock(this);
  if (absl::Status s = ledger_.CheckStream(QuotaLedger::Stream::kWatch, caller.uid); !s.ok()) {
    return s;
  }
  const uint64_t id =
      watch_hub_.Add(caller, std::move(prefix), after_version, next_version_ - 1, std::move(wake));
  ledger_.OpenStream(QuotaLedger::Stream::kWatch, id, caller.uid);
  return id;
}

absl::StatusOr<std::vector<StoreEvent>> TensorStore::TakeEvents(uint64_t watcher_id, size_t max) {
  return watch_hub_.Take(watcher_id, max);
}

void TensorStore::Unwatch(uint64_t watcher_id) {
  watch_hub_.Remove(watcher_id);
  Locked lock(this);
  ledger_.CloseStream(QuotaLedger::Stream::kWatch, watcher_id);
}

void TensorStore::UnpublishLocked(const std::string& name, uint64_t version) {
  TensorObject* object = objects_.at(names_.RemoveVersion(name, version)).get();
  object->published = false;
  JournalUnpublishedLocked(*object);
  MaybeFreeLocked(object);
  // Versions that lease tables kept are looked at again at every unpublication (the readers
  // of a name replaced often let go of the last version as the next comes).
  if (!slot_pinned_.empty()) ReclaimSlotPinnedLocked();
}

void TensorStore::DropPendingLocked(TensorObject* object) {
  names_.ErasePending(object->spec.name);
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

absl::StatusOr<TensorView> TensorStore::CommitPut(const PutTicket& ticket) {
  Locked lock(this);
  auto it = objects_.find(ticket.object_id);
  absl::StatusOr<TensorView> result = absl::InternalError("put ticket is no longer pending");
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
    result = PublishLocked(it->second.get(), Principal{uid, {}, false, {}});
    if (const auto& origin = it->second->spec.origin; origin.has_value()) {
      StoreStats::Remote& counts = remote_counts_[origin->peer];
      ++counts.fetches;
      counts.fetched_bytes += it->second->spec.nbytes;
    }
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
  if (absl::Status s = ledger_.CheckStream(QuotaLedger::Stream::kRead, caller.uid); !s.ok()) {
    return s;
  }
  TensorGrant grant = GrantLocked(kInternalSession, object, /*writable=*/false);
  ledger_.OpenStream(QuotaLedger::Stream::kRead, grant.lease_id, caller.uid);
  return ReadTicket{std::move(grant.info), object->block.data, grant.lease_id};
}

void TensorStore::EndRead(uint64_t lease_id) {
  Locked lock(this);
  ledger_.CloseStream(QuotaLedger::Stream::kRead, lease_id);
  auto object_id = leases_.Remove(kInternalSession, lease_id);
  if (object_id.ok()) ReleaseLeaseOnLocked(*object_id);
}

TensorGrant TensorStore::GrantLocked(const std::string& session_id, TensorObject* object,
                                     bool writable) {
  TensorGrant grant;
  grant.lease_id = leases_.Add(session_id, object->id);
  ++object->leases;
  object->last_granted = ++grant_clock_;
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
  if (absl::Status s = sessions_.Check(session_id); !s.ok()) return s;
  absl::StatusOr<TensorObject*> object =
      PickVersionLocked(sessions_.PrincipalOf(session_id), name, wanted);
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
    absl::Time deadline, uint64_t* waiter_id, GetCallback on_ready, absl::Time* wait_until) {
  if (absl::Status s = CheckVersionWanted(wanted); !s.ok()) return absl::StatusOr<TensorGrant>(s);
  Locked lock(this);
  if (auto now = TryGetLocked(session_id, name, wanted); now.has_value()) return now;
  const absl::Time now = absl::Now();
  // A peer's tensor not held here: fetched, and waited for (wait_until) even by a Get that would
  // not wait; a Get with a wait of its own waits as long as it said. A pending name under a
  // remote prefix is a replica on its way (nothing else may be made there): the Get waits for
  // it too (the fetcher runs one fetch per name).
  const bool fetch = options_.remote != nullptr && wanted.version == 0 &&
                     names_.Find(name) == nullptr && options_.remote->PeerFor(name).has_value();
  const bool own_wait = now < deadline;
  const absl::Time until =
      fetch && !own_wait && wait_until != nullptr ? now + kRemoteFetchWait : deadline;
  if (now >= until) return absl::StatusOr<TensorGrant>(NothingNewer(name, wanted));
  const uint32_t uid = sessions_.PrincipalOf(session_id).uid;  // TryGetLocked checked it
  absl::StatusOr<uint64_t> id = waiters_.Add(
      Waiter{uid, session_id, name, wanted.after_version, std::move(on_ready), fetch && !own_wait});
  if (!id.ok()) return absl::StatusOr<TensorGrant>(id.status());
  *waiter_id = *id;
  if (wait_until != nullptr) *wait_until = until;
  if (fetch) {
    deferred_.push_back([remote = options_.remote, name] { remote->RequestFetch(name); });
  }
  return std::nullopt;
}

bool TensorStore::CancelWait(uint64_t waiter_id) {
  Locked lock(this);
  return waiters_.Remove(waiter_id);
}

void TensorStore::AnswerWaitersLocked(
    const std::function<std::optional<absl::StatusOr<TensorGrant>>(const Waiter&)>& answer) {
  waiters_.RemoveIf([&](Waiter& waiter) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::optional<absl::StatusOr<TensorGrant>> result = answer(waiter);
    if (!result.has_value()) return false;
    deferred_.push_back([on_ready = std::move(waiter.on_ready),
                         result = *std::move(result)]() mutable { on_ready(std::move(result)); });
    return true;
  });
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
  if (absl::Status s = sessions_.Check(session_id); !s.ok()) return s;
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
  if (absl::Status s = sessions_.Check(session_id); !s.ok()) return s;
  auto object_id = leases_.ObjectOf(session_id, lease_id);
  if (!object_id.ok()) return object_id.status();
  const TensorObject& object = *objects_.at(*object_id);
  if (object.block.read_only_fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("lease_id: ", lease_id,
                     " is on a tensor in a legacy CUDA IPC slab, which has no descriptor"));
  }
  SegmentDescriptor descriptor;
  descriptor.segment = object.block.segment;
  descriptor.device = object.block.device;
  descriptor.size = object.block.segment_size;
  descriptor.writable =
      object.spec.is_mutable || (object.pending && object.owner_session == session_id);
  return descriptor;
}

absl::StatusOr<TensorGrant> TensorStore::Retain(const std::string& session_id, uint64_t lease_id) {
  Locked lock(this);
  if (absl::Status s = CheckServing(); !s.ok()) return s;
  if (absl::Status s = sessions_.Check(session_id); !s.ok()) return s;
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
    if (const std::optional<uint64_t> pending = names_.PendingObject(name);
        pending.has_value() && MayReadLocked(caller, *objects_.at(*pending))) {
      return absl::FailedPreconditionError(
          absl::StrCat("name '", name, "' is not sealed yet; its creator can Abort it"));
    }
    return NotPublished(name);
  }
  if (object->spec.origin.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat("name '", name, "' is a replica of peer ",
                                                      object->spec.origin->peer,
                                                      "'s tensor: delete it there"));
  }
  const uint32_t owner = names_.Find(name)->owner_uid;
  if (!caller.admin && owner != caller.uid) {
    return absl::PermissionDeniedError(
        absl::StrCat("name '", name, "' belongs to ", DescribeUid(owner),
                     "; only its owner or an administrator may delete it"));
  }
  DeleteNameLocked(name, absl::StrCat("by ", DescribeUid(caller.uid)));
  return absl::OkStatus();
}

void TensorStore::DeleteNameLocked(const std::string& name, const std::string& why) {
  const NameIndex::Published& entry = *names_.Find(name);
  const TensorObject& object = *objects_.at(entry.current());
  const size_t older = entry.versions.size() - 1;
  EmitLocked(StoreEvent::Kind::kDeleted, object, 0);
  Log(LogLevel::kInfo, "'", LogSafe(name), "' deleted (version ", object.version, ", owner ",
      DescribeUid(entry.owner_uid),
      older == 0 ? std::string() : absl::StrCat(", and ", older, " older kept version(s)"), ") ",
      why);
  while (!entry.versions.empty()) UnpublishLocked(name, entry.versions.begin()->first);
  names_.Erase(name);
}

absl::Status TensorStore::AdoptPublished(AdoptedTensor tensor) {
  Locked lock(this);
  const std::string name = tensor.spec.name;
  if (!names_.MayAdopt(name, tensor.name_owner, tensor.version)) {
    return absl::AlreadyExistsError(absl::StrCat("name '", name, "' is taken"));
  }
  absl::StatusOr<uint64_t> token = NewPinTokenLocked();
  if (!token.ok()) return token.status();
  auto object = std::make_unique<TensorObject>();
  object->id = next_object_id_++;
  object->pin_token = *token;
  pin_tokens_.emplace(*token, object->id);
  object->spec = std::move(tensor.spec);
  object->block = std::move(tensor.block);
  object->published = true;
  object->sealed = true;
  object->version = tensor.version;
  object->created_unix_ms = tensor.created_unix_ms;
  ledger_.Charge(object->spec.owner_uid, object->spec.nbytes);
  next_version_ = std::max(next_version_, tensor.version + 1);
  watch_hub_.Forget(next_version_ - 1, &deferred_);  // the previous instance's events are gone
  names_.Adopt(name, tensor.name_owner, object->spec.keep, tensor.version, object->id);
  objects_.emplace(object->id, std::move(object));
  return absl::OkStatus();
}

void TensorStore::EndAdoptionGrace() {
  Locked lock(this);
  for (auto& pool : pools_) pool->EndAdoptionGrace();
}

void TensorStore::ExportState(TensorJournal* journal) {
  Locked lock(this);
  for (auto& pool : pools_) pool->ReplaySegments(journal);
  for (const auto& [name, published] : names_.published()) {
    for (const auto& [version, object_id] : published.versions) {
      auto it = objects_.find(object_id);
      if (it != objects_.end()) JournalPublishedLocked(*it->second, journal);
    }
  }
}

void TensorStore::JournalPublishedLocked(const TensorObject& object, TensorJournal* journal) {
  if (journal == nullptr) journal = options_.journal;
  if (journal == nullptr || !Survives(object.block, object.spec)) return;
  JournaledTensor tensor;
  tensor.view = ViewLocked(object);
  tensor.view.leases = 0;  // leases end with the instance
  tensor.publisher_uid = object.spec.owner_uid;
  tensor.segment = object.block.segment;
  tensor.segment_size = object.block.segment_size;
  tensor.offset = object.block.offset;
  tensor.block_size = object.block.size;
  journal->TensorPublished(tensor);
}

void TensorStore::JournalUnpublishedLocked(const TensorObject& object) {
  if (options_.journal == nullptr || !Survives(object.block, object.spec)) return;
  options_.journal->TensorUnpublished(object.version);
}

void TensorStore::MaybeFreeLocked(TensorObject* object) {
  if (object->pending || object->published || object->leases > 0) return;
  // The protocol's second step: the directories moved on before this; a slot that names the
  // version now was written before its reader checked the record again, so the reader keeps it.
  if (!slot_tables_.empty() && object->sealed && slot_pinned_.count(object->id) == 0) {
    const TensorSpec& spec = object->spec;
    std::vector<std::string> holders = slot_tables_.Holders(
        object->pin_token, [&](const Principal& reader) { return SpecAllows(reader, spec); });
    if (!holders.empty()) {
      slot_pinned_.emplace(object->id, std::move(holders));
      return;
    }
  }
  if (slot_pinned_.count(object->id) != 0) return;  // its holders' tables are asked again
  FreeLocked(object);
}

void TensorStore::FreeLocked(TensorObject* object) {
  slot_pinned_.erase(object->id);
  pin_tokens_.erase(object->pin_token);
  std::vector<std::string> removed;
  PoolForLocked(object->block.device)->Free(object->block, &removed);
  if (!object->spec.origin.has_value()) ledger_.Refund(object->spec.owner_uid, object->spec.nbytes);
  objects_.erase(object->id);
  sessions_.NotifySegmentsRemoved(removed);
}

ListPage TensorStore::List(const Principal& caller, const std::string& prefix, size_t page_size,
                           const std::string& page_token) {
  ListPage page;
  TableQuestion question;
  std::vector<uint64_t> tokens;  // of page.tensors, in order
  {
    Locked lock(this);
    // The token is the last name of the previous page: this one starts after it.
    const std::map<std::string, NameIndex::Published>& published = names_.published();
    auto it =
        page_token < prefix ? published.lower_bound(prefix) : published.upper_bound(page_token);
    for (; it != published.end() && absl::StartsWith(it->first, prefix); ++it) {
      const TensorObject& object = *objects_.at(it->second.current());
      if (!MayReadLocked(caller, object)) continue;
      if (page.tensors.size() == page_size) {
        page.next_page_token = page.tensors.back().name;
        break;
      }
      page.tensors.push_back(WithKeptVersionsLocked(caller, ViewLocked(object)));
      tokens.push_back(object.pin_token);
      AskAboutLocked(object, &question);
    }
  }
  const TableHoldings counted = question.Count();  // the lock released: no one waits on it
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (auto found = counted.find(tokens[i]); found != counted.end()) {
      page.tensors[i].leases += found->second;
    }
  }
  return page;
}

absl::StatusOr<TensorView> TensorStore::Stat(const Principal& caller, const std::string& name) {
  TensorView view;
  TableQuestion question;
  uint64_t token = 0;
  {
    Locked lock(this);
    const TensorObject* object = VisibleLocked(caller, name);
    if (object == nullptr) {
      if (const std::optional<uint64_t> pending = names_.PendingObject(name);
          pending.has_value() && MayReadLocked(caller, *objects_.at(*pending))) {
        return ViewLocked(*objects_.at(*pending));
      }
      return NotPublished(name);
    }
    view = WithKeptVersionsLocked(caller, ViewLocked(*object));
    token = object->pin_token;
    AskAboutLocked(*object, &question);
  }
  const TableHoldings counted = question.Count();  // the lock released: no one waits on it
  if (auto found = counted.find(token); found != counted.end()) view.leases += found->second;
  return view;
}

StoreStats TensorStore::Stats(const Principal& caller) {
  StoreStats stats;
  TableQuestion question;
  {
    Locked lock(this);
    // Lease tables are released by a store the daemon does not hear of: look at them now, so
    // that the figures are those of this moment.
    ReclaimSlotPinnedLocked();
    StatsLocked(caller, &stats);
    for (const auto& [id, object] : objects_) AskAboutLocked(*object, &question);
  }
  for (const auto& [token, slots] : question.Count()) stats.leases += slots;
  return stats;
}

void TensorStore::StatsLocked(const Principal& caller, StoreStats* out) const {
  StoreStats& stats = *out;
  const PoolStats pool = pools_.front()->Stats();
  for (const auto& each : pools_) {
    const PoolStats figures = each->Stats();
    stats.pools.push_back({each->device(), figures.capacity_bytes, figures.used_bytes,
                           figures.reserved_bytes, figures.segments, figures.handles});
  }
  stats.capacity_bytes = pool.capacity_bytes;
  stats.used_bytes = pool.used_bytes;
  stats.reserved_bytes = pool.reserved_bytes;
  stats.segments = pool.segments;
  if (caller.admin) {
    stats.tensors = names_.published().size();
  } else {
    for (const auto& [name, entry] : names_.published()) {
      stats.tensors += MayReadLocked(caller, *objects_.at(entry.current())) ? 1 : 0;
    }
  }
  stats.leases = leases_.size();  // the tables' leases are counted after the lock is released
  stats.clients = sessions_.size();
  stats.pending = names_.pending().size();
  stats.waiting_gets = waiters_.size();
  stats.watchers = watch_hub_.watchers();
  stats.users = ledger_.Users(caller);
  if (caller.admin) stats.remotes = RemotesLocked();
}

size_t TensorStore::ExpirePending(absl::Time now) {
  Locked lock(this);
  ReclaimSlotPinnedLocked();  // the tick that frees what lease tables let go of meanwhile
  std::vector<TensorObject*> expired;
  for (const auto& [name, object_id] : names_.pending()) {
    TensorObject* object = objects_.at(object_id).get();
    if (now - object->pending_since >= options_.pending_timeout) expired.push_back(object);
  }
  for (TensorObject* object : expired) {
    const std::string name = object->spec.name;
    Log(LogLevel::kWarning, "'", LogSafe(name),
        "' aborted: ", object->owner_session.empty() ? "its Put did not finish" : "not sealed",
        " within the pending timeout (", absl::FormatDuration(options_.pending_timeout),
        "); owner ", DescribeUid(object->spec.owner_uid),
        sessions_.Description(object->owner_session), "; the name is free again");
    // Reported at the creator's next Seal or Abort.
    sessions_.ExpirePending(object->owner_session, name);
    object->expired = true;
    if (object->on_expired) deferred_.push_back(std::move(object->on_expired));
    object->on_expired = nullptr;
    DropPendingLocked(object);
  }
  return expired.size();
}

void TensorStore::Shutdown() {
  Locked lock(this);
  shutting_down_ = true;
  watch_hub_.Shutdown(&deferred_);
  AnswerWaitersLocked([](const Waiter&) -> std::optional<absl::StatusOr<TensorGrant>> {
    return absl::StatusOr<TensorGrant>(absl::UnavailableError("tensorbrokerd is shutting down"));
  });
}

TensorView TensorStore::WithKeptVersionsLocked(const Principal& caller, TensorView info) const {
  if (const NameIndex::Published* name = names_.Find(info.name); name != nullptr) {
    for (const auto& [version, object_id] : name->versions) {
      if (MayReadLocked(caller, *objects_.at(object_id))) info.kept_versions.push_back(version);
    }
  }
  return info;
}

TensorView TensorStore::ViewLocked(const TensorObject& object) const {
  TensorView view;
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
  const NameIndex::Published* name = names_.Find(object.spec.name);
  const bool named =
      name != nullptr && object.published && name->versions.count(object.version) != 0;
  view.owner_uid = named ? name->owner_uid : object.spec.owner_uid;
  view.keep = named ? name->keep : object.spec.keep;
  view.readers = object.spec.readers.Entries();
  view.ephemeral = object.spec.ephemeral;
  view.origin = object.spec.origin;
  return view;
}

}  // namespace tensorbroker::daemon
