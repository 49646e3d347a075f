// The one list of what Stats reports: a row per counter of BrokerStats (and of each pool and
// user in it) with its key, its CLI label, its Prometheus metric and help, its unit and its
// member. Everything that shows the counters reads these rows: the CLI's text and JSON
// (cli/info_format.cc), the Python dict (python/src/py_client.cc), the Prometheus text
// (common/prometheus_format.cc, the daemon's /metrics too) and the proto conversion
// (common/wire/proto_convert.cc and the daemon's daemon/wire/store_proto.cc, which find each row's
// proto field by its key). The rows are templates over the struct they point into: the public
// BrokerStats (kBrokerStatsFields, ...) and the daemon's StoreStats (daemon/store/store_types.h),
// whose members carry the same names.
//
// A new counter: a uint64_t member of BrokerStats and of the daemon's StoreStats, a uint64 field
// of the same name in v1.BrokerStats (proto/tensorbroker/v1/broker.proto), and a row here.
//
// Header-only constant data and templates, so that the Python extension compiles it in
// (it links the client library's API only). Thread-safe.
#ifndef TENSORBROKER_COMMON_STATS_SCHEMA_H_
#define TENSORBROKER_COMMON_STATS_SCHEMA_H_

#include <cstdint>

#include "tensorbroker/dtype_names.h"
#include "tensorbroker/types.h"

namespace tensorbroker {

enum class StatsUnit {
  kBytes,  // CLI text: "1.5 MiB"
  kCount,  // CLI text: the number
};

template <typename Struct>
struct StatsField {
  const char* key;         // CLI JSON key, Python dict key and the proto field's name
  const char* label;       // CLI text ("waiting gets"); nullptr in the pool and user rows
  const char* prometheus;  // metric name; nullptr: not exported on its own (see kPoolStatsFields)
  const char* help;        // what it counts: Prometheus' HELP line
  StatsUnit unit;
  uint64_t Struct::*member;
};

// Daemon-wide counters, in the order every output shows them. The byte and segment figures are
// the CPU pool's: Prometheus exports them per pool (kPoolStatsFields) rather than on their own.
template <typename Stats>
inline constexpr StatsField<Stats> kBrokerStatsRows[] = {
    {"capacity_bytes", "capacity", nullptr, "Most memory the daemon may hold in CPU memory.",
     StatsUnit::kBytes, &Stats::capacity_bytes},
    {"used_bytes", "used", nullptr, "CPU bytes allocated to tensors.", StatsUnit::kBytes,
     &Stats::used_bytes},
    {"reserved_bytes", "reserved", nullptr, "Bytes of shared-memory segments held.",
     StatsUnit::kBytes, &Stats::reserved_bytes},
    {"tensors", "tensors", "tensorbroker_tensors", "Published tensor names.", StatsUnit::kCount,
     &Stats::tensors},
    {"leases", "leases", "tensorbroker_leases", "Live leases.", StatsUnit::kCount, &Stats::leases},
    {"clients", "clients", "tensorbroker_clients", "Open client sessions.", StatsUnit::kCount,
     &Stats::clients},
    {"segments", "segments", nullptr, "Shared-memory segments held.", StatsUnit::kCount,
     &Stats::segments},
    {"pending", "pending", "tensorbroker_pending_tensors", "Tensors created and not yet sealed.",
     StatsUnit::kCount, &Stats::pending},
    {"waiting_gets", "waiting gets", "tensorbroker_waiting_gets",
     "Gets waiting for their name to be published.", StatsUnit::kCount, &Stats::waiting_gets},
    {"watchers", "watchers", "tensorbroker_watchers", "Watch streams open.", StatsUnit::kCount,
     &Stats::watchers},
};

// Each memory pool's counters (BrokerStats::pools; Prometheus label device="cpu"|"cuda:N").
template <typename Pool>
inline constexpr StatsField<Pool> kPoolStatsRows[] = {
    {"capacity_bytes", nullptr, "tensorbroker_capacity_bytes",
     "Most memory the daemon may hold on the device.", StatsUnit::kBytes, &Pool::capacity_bytes},
    {"used_bytes", nullptr, "tensorbroker_used_bytes",
     "Bytes allocated to tensors (pending and unlinked included).", StatsUnit::kBytes,
     &Pool::used_bytes},
    {"reserved_bytes", nullptr, "tensorbroker_reserved_bytes",
     "Bytes of shared-memory segments or CUDA slabs held.", StatsUnit::kBytes,
     &Pool::reserved_bytes},
    {"segments", nullptr, "tensorbroker_segments", "Shared-memory segments or CUDA slabs held.",
     StatsUnit::kCount, &Pool::segments},
};

// What each user holds, and their quota (BrokerStats::users; Prometheus labels uid and user).
template <typename User>
inline constexpr StatsField<User> kUserStatsRows[] = {
    {"bytes", nullptr, "tensorbroker_user_bytes",
     "Bytes of the tensors each user holds (every version in memory).", StatsUnit::kBytes,
     &User::bytes},
    {"tensors", nullptr, "tensorbroker_user_tensors",
     "Tensors each user holds (every version in memory).", StatsUnit::kCount, &User::tensors},
    {"quota_bytes", nullptr, "tensorbroker_user_quota_bytes",
     "Each user's quota of bytes (0: unlimited).", StatsUnit::kBytes, &User::quota_bytes},
    {"quota_tensors", nullptr, "tensorbroker_user_quota_tensors",
     "Each user's quota of tensors (0: unlimited).", StatsUnit::kCount, &User::quota_tensors},
};

// What each peer did here (BrokerStats::peers; Prometheus label peer): counters since start.
template <typename Peer>
inline constexpr StatsField<Peer> kPeerStatsRows[] = {
    {"calls", nullptr, "tensorbroker_peer_calls_total",
     "Calls each peer (another broker, --peer-listen) made.", StatsUnit::kCount, &Peer::calls},
    {"sent_bytes", nullptr, "tensorbroker_peer_sent_bytes_total",
     "Tensor bytes sent to each peer on Read streams.", StatsUnit::kBytes, &Peer::sent_bytes},
};

// What this broker holds and fetched of each remote[PREFIX] address's tensors
// (BrokerStats::remotes; Prometheus label peer): gauges, then counters since start (_total).
template <typename Remote>
inline constexpr StatsField<Remote> kRemoteStatsRows[] = {
    {"replicas", nullptr, "tensorbroker_remote_replicas",
     "Replicas held of each remote[PREFIX] address's tensors.", StatsUnit::kCount,
     &Remote::replicas},
    {"replica_bytes", nullptr, "tensorbroker_remote_replica_bytes",
     "Bytes of the replicas held of each remote[PREFIX] address's tensors.", StatsUnit::kBytes,
     &Remote::replica_bytes},
    {"fetches", nullptr, "tensorbroker_remote_fetches_total",
     "Replicas fetched from each remote[PREFIX] address (first fetches and new versions).",
     StatsUnit::kCount, &Remote::fetches},
    {"fetched_bytes", nullptr, "tensorbroker_remote_fetched_bytes_total",
     "Bytes fetched from each remote[PREFIX] address.", StatsUnit::kBytes, &Remote::fetched_bytes},
    {"fetch_failures", nullptr, "tensorbroker_remote_fetch_failures_total",
     "Fetches from each remote[PREFIX] address that failed (nothing published).", StatsUnit::kCount,
     &Remote::fetch_failures},
    {"evictions", nullptr, "tensorbroker_remote_evictions_total",
     "Replicas of each remote[PREFIX] address's tensors unpublished to make room.",
     StatsUnit::kCount, &Remote::evictions},
};

// The rows of the public structs.
inline constexpr const auto& kBrokerStatsFields = kBrokerStatsRows<BrokerStats>;
inline constexpr const auto& kPoolStatsFields = kPoolStatsRows<PoolUsage>;
inline constexpr const auto& kUserStatsFields = kUserStatsRows<UserUsage>;
inline constexpr const auto& kPeerStatsFields = kPeerStatsRows<PeerUsage>;
inline constexpr const auto& kRemoteStatsFields = kRemoteStatsRows<RemoteUsage>;

// Walks `stats` as the CLI's JSON object and the Python dict show it: every kBrokerStatsFields
// row, then the list "pools" (per pool: "device", "handles", then its kPoolStatsFields rows), then
// the list "users" (per user: "uid", "user", then its kUserStatsFields rows), then the list
// "peers" (per peer: "peer", then its kPeerStatsFields rows), then the list "remotes" (per
// remote[] address: "peer", then its kRemoteStatsFields rows). Per-method figures
// are Prometheus' alone. `out` has Number(key, uint64_t), String(key, const std::string&),
// BeginList(key), BeginItem(), EndItem() and EndList().
template <typename Out>
void WalkStats(const BrokerStats& stats, Out& out) {
  for (const auto& row : kBrokerStatsFields) out.Number(row.key, stats.*row.member);
  out.BeginList("pools");
  for (const PoolUsage& pool : stats.pools) {
    out.BeginItem();
    out.String("device", DeviceName(pool.device));
    out.String("handles", pool.handles);
    for (const auto& row : kPoolStatsFields) out.Number(row.key, pool.*row.member);
    out.EndItem();
  }
  out.EndList();
  out.BeginList("users");
  for (const UserUsage& user : stats.users) {
    out.BeginItem();
    out.Number("uid", user.uid);
    out.String("user", user.user);
    for (const auto& row : kUserStatsFields) out.Number(row.key, user.*row.member);
    out.EndItem();
  }
  out.EndList();
  out.BeginList("peers");
  for (const PeerUsage& peer : stats.peers) {
    out.BeginItem();
    out.String("peer", peer.peer);
    for (const auto& row : kPeerStatsFields) out.Number(row.key, peer.*row.member);
    out.EndItem();
  }
  out.EndList();
  out.BeginList("remotes");
  for (const RemoteUsage& remote : stats.remotes) {
    out.BeginItem();
    out.String("peer", remote.peer);
    for (const auto& row : kRemoteStatsFields) out.Number(row.key, remote.*row.member);
    out.EndItem();
  }
  out.EndList();
}

}  // namespace tensorbroker

#endif  // TENSORBROKER_COMMON_STATS_SCHEMA_H_
