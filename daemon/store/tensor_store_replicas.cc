// TensorStore's replicas of other brokers' tensors (remote prefixes): taking them in, keeping
// them fresh (what the watches of replica_watches ask), evicting them for room, and failing the
// Gets that wait for a fetch. The rest of the store is tensor_store.cc.
#include <algorithm>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/base/log.h"
#include "daemon/store/store_lock.h"
#include "daemon/store/tensor_store.h"

namespace tensorbroker::daemon {

absl::StatusOr<PutTicket> TensorStore::BeginReplica(const TensorSpec& spec) {
  Locked lock(this);
  const std::string& name = spec.name;
  if (names_.IsPending(name)) {
    return absl::AlreadyExistsError(absl::StrCat("name '", name, "' is being created here"));
  }
  if (const NameIndex::Published* published = names_.Find(name); published != nullptr) {
    const std::optional<ReplicaOrigin>& held = objects_.at(published->current())->spec.origin;
    if (!held.has_value()) {
      return absl::AlreadyExistsError(
          absl::StrCat("name '", name, "' holds a tensor published here, not a replica"));
    }
    if (held->version >= spec.origin->version) {
      return absl::AlreadyExistsError(
          absl::StrCat("name '", name, "' holds origin version ", held->version, " already"));
    }
  }
  if (absl::Status s = CheckFetchRoomLocked(spec); !s.ok()) return s;
  TensorSpec replica = spec;
  replica.replace = true;
  replica.keep = 1;
  // The daemon's own act: no publishers rule, no descriptor reserve, any owner's name.
  Principal daemon;
  daemon.uid = spec.owner_uid;
  daemon.admin = true;
  auto object = ReserveLocked(kInternalSession, daemon, replica);
  if (!object.ok()) return object.status();
  const TensorGrant grant = GrantLocked(kInternalSession, *object, /*writable=*/true);
  return PutTicket{(*object)->id, (*object)->block.data, replica.nbytes, (*object)->block.device,
                   grant.lease_id};
}

absl::Status TensorStore::CheckFetchRoomLocked(const TensorSpec& spec) const {
  const MemoryPool* pool = PoolForLocked(spec.device);
  if (pool == nullptr) return absl::OkStatus();  // ReserveLocked says why
  const uint64_t most = pool->Stats().capacity_bytes / kFetchShareDivisor;
  uint64_t held = 0;
  for (const auto& [name, object_id] : names_.pending()) {
    const TensorObject& object = *objects_.at(object_id);
    if (object.spec.origin.has_value()) held += object.block.size;
  }
  if (spec.nbytes <= most && held <= most - spec.nbytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "name '", spec.name, "' (", spec.nbytes, " bytes from peer ", spec.origin->peer,
      "): fetches in flight may hold ", most, " bytes together (1/", kFetchShareDivisor,
      " of the capacity) and hold ", held, " now; a Get after they end fetches it"));
}

void TensorStore::FailFetch(const std::string& name, const absl::Status& status) {
  Locked lock(this);
  const bool every_waiter = !absl::IsNotFound(status);
  if (every_waiter && options_.remote != nullptr) {
    if (std::optional<std::string> peer = options_.remote->PeerFor(name); peer.has_value()) {
      ++remote_counts_[*peer].fetch_failures;
    }
  }
  AnswerWaitersLocked([&](const Waiter& waiter) -> std::optional<absl::StatusOr<TensorGrant>> {
    if (waiter.name != name || !(waiter.for_fetch || every_waiter)) return std::nullopt;
    return absl::StatusOr<TensorGrant>(status);
  });
}

bool TensorStore::EvictableFor(const TensorObject& object, const DLDevice& device,
                               const TableHoldings& held) {
  // Held through a lease table, evicting it would free no room.
  return object.spec.origin.has_value() && object.leases == 0 &&
         object.block.device.device_type == device.device_type &&
         object.block.device.device_id == device.device_id && !held.contains(object.id);
}

bool TensorStore::EvictionCouldMakeRoomLocked(const MemoryPool& pool, uint64_t nbytes) {
  const PoolStats stats = pool.Stats();
  uint64_t room = stats.capacity_bytes - std::min(stats.used_bytes, stats.capacity_bytes);
  const TableHoldings held = TableHoldingsLocked();
  for (const auto& [name, entry] : names_.published()) {
    const TensorObject& object = *objects_.at(entry.current());
    if (EvictableFor(object, pool.device(), held)) room += object.block.size;
    if (room >= nbytes) return true;
  }
  return room >= nbytes;
}

bool TensorStore::EvictReplicaLocked(const DLDevice& device) {
  const TableHoldings held = TableHoldingsLocked();
  const TensorObject* oldest = nullptr;
  for (const auto& [name, entry] : names_.published()) {
    const TensorObject* object = objects_.at(entry.current()).get();
    if (!EvictableFor(*object, device, held)) continue;
    if (oldest == nullptr || object->last_granted < oldest->last_granted) oldest = object;
  }
  if (oldest == nullptr) return false;
  const std::string name = oldest->spec.name;
  ++remote_counts_[oldest->spec.origin->peer].evictions;
  DeleteNameLocked(name, absl::StrCat("(a replica of peer ", oldest->spec.origin->peer,
                                      "'s, evicted for room; fetched again when asked for)"));
  return true;
}

std::map<std::string, uint64_t> TensorStore::ReplicasFrom(absl::string_view prefix,
                                                          absl::string_view target) const {
  Locked lock(this);
  std::map<std::string, uint64_t> found;
  for (const auto& [name, entry] : names_.published()) {
    if (!absl::StartsWith(name, prefix)) continue;
    const std::optional<ReplicaOrigin>& origin = objects_.at(entry.current())->spec.origin;
    if (origin.has_value() && origin->target == target) found.emplace(name, origin->version);
  }
  return found;
}

std::optional<uint64_t> TensorStore::ReplicaVersion(const std::string& name,
                                                    absl::string_view target) const {
  Locked lock(this);
  const NameIndex::Published* published = names_.Find(name);
  if (published == nullptr) return std::nullopt;
  const std::optional<ReplicaOrigin>& origin = objects_.at(published->current())->spec.origin;
  if (!origin.has_value() || origin->target != target) return std::nullopt;
  return origin->version;
}

TensorStore::ReplicaDrop TensorStore::DropReplica(const std::string& name, uint64_t up_to,
                                                  absl::string_view target,
                                                  const std::string& why) {
  Locked lock(this);
  const NameIndex::Published* published = names_.Find(name);
  if (published == nullptr) return ReplicaDrop::kNotHeld;
  const std::optional<ReplicaOrigin>& origin = objects_.at(published->current())->spec.origin;
  if (!origin.has_value()) return ReplicaDrop::kNotHeld;
  if (origin->target != target) return ReplicaDrop::kFromAnotherOrigin;
  if (origin->version > up_to) return ReplicaDrop::kNewerHeld;
  DeleteNameLocked(name, absl::StrCat("(a replica of peer ", origin->peer, "'s: ", why, ")"));
  return ReplicaDrop::kDropped;
}

std::vector<StoreStats::Remote> TensorStore::RemotesLocked() const {
  std::map<std::string, StoreStats::Remote> by_peer = remote_counts_;
  for (const auto& [name, entry] : names_.published()) {
    for (const auto& [version, object_id] : entry.versions) {
      const TensorObject& object = *objects_.at(object_id);
      if (!object.spec.origin.has_value()) continue;
      StoreStats::Remote& row = by_peer[object.spec.origin->peer];
      ++row.replicas;
      row.replica_bytes += object.spec.nbytes;
    }
  }
  std::vector<StoreStats::Remote> rows;
  for (auto& [peer, row] : by_peer) {
    row.peer = peer;
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace tensorbroker::daemon
