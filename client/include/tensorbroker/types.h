// tensorbroker's plain data types, shared by the client library and the daemon: dtype
// constants, what the broker reports about a tensor, and its daemon-wide counters.
// Values only; no ownership, no threading concerns.
#ifndef TENSORBROKER_TYPES_H_
#define TENSORBROKER_TYPES_H_

#include <dlpack/dlpack.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

static_assert(DLPACK_MAJOR_VERSION >= 1, "tensorbroker needs DLPack >= 1.0 (libdlpack-dev 1.0)");

namespace tensorbroker {

namespace dtypes {
inline constexpr DLDataType kBool{kDLBool, 8, 1};
inline constexpr DLDataType kInt8{kDLInt, 8, 1};
inline constexpr DLDataType kInt16{kDLInt, 16, 1};
inline constexpr DLDataType kInt32{kDLInt, 32, 1};
inline constexpr DLDataType kInt64{kDLInt, 64, 1};
inline constexpr DLDataType kUInt8{kDLUInt, 8, 1};
inline constexpr DLDataType kUInt16{kDLUInt, 16, 1};
inline constexpr DLDataType kUInt32{kDLUInt, 32, 1};
inline constexpr DLDataType kUInt64{kDLUInt, 64, 1};
inline constexpr DLDataType kFloat16{kDLFloat, 16, 1};
inline constexpr DLDataType kFloat32{kDLFloat, 32, 1};
inline constexpr DLDataType kFloat64{kDLFloat, 64, 1};
inline constexpr DLDataType kBFloat16{kDLBfloat, 16, 1};
inline constexpr DLDataType kComplex64{kDLComplex, 64, 1};
inline constexpr DLDataType kComplex128{kDLComplex, 128, 1};
}  // namespace dtypes

// What the broker reports about a tensor (Stat, List, Put).
struct TensorInfo {
  std::string name;
  DLDataType dtype{};
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // in elements
  uint64_t nbytes = 0;
  // CUDA: from Describe(), this process's ordinal; from Stat/List/Put/Seal, the daemon's.
  DLDevice device{kDLCPU, 0};
  bool sealed = false;
  bool is_mutable = false;
  uint64_t version = 0;
  uint32_t leases = 0;
  int64_t created_unix_ms = 0;
  uint32_t owner_uid = 0;            // the uid that published the name first
  std::vector<std::string> readers;  // who may read it: {"*"} or "uid:N" / "gid:N" entries
  // History: how many versions of the name stay readable by number, and which do now (ascending;
  // the last is the current one): from Stat, List, Put and Seal; empty from Get (Describe) and
  // for a pending tensor.
  uint32_t keep = 1;
  std::vector<uint64_t> kept_versions;
  // Deleted when the session that created it ends (CreateOptions::ephemeral).
  bool ephemeral = false;
  // A replica of another broker's tensor (remote[PREFIX] in the daemon's settings): where it
  // came from. Unset for a tensor published on this broker.
  struct Origin {
    std::string peer;      // the address it was fetched from, as configured
    uint64_t version = 0;  // the origin's version (`version` above is this broker's)
    int64_t fetched_unix_ms = 0;
  };
  std::optional<Origin> origin;
};

// One change under a watched prefix (Client::Watch). Sequences are the daemon's version
// counter: a publication's sequence is the new version; a deletion or expiry takes a number of
// its own. Events come in increasing sequence; numbers a watcher may not see are skipped.
struct WatchEvent {
  enum class Kind {
    kPublished,  // the name had no published version; `version` is the new one
    kReplaced,   // a newer version; `previous_version` was the current one
    kDeleted,    // the name was unpublished (every kept version); `version` was the current one
    kExpired,    // `version` dropped out of the name's kept history (keep)
    kLost,       // events with sequences lost_first..lost_last may have been missed
  };
  Kind kind = Kind::kPublished;
  uint64_t sequence = 0;  // kLost: lost_last
  std::string name;       // empty for kLost
  uint64_t version = 0;
  uint64_t previous_version = 0;  // kReplaced
  TensorInfo info;                // the version concerned, as it was at the event (leases: 0)
  uint64_t lost_first = 0;
  uint64_t lost_last = 0;
};

// "published", "replaced", "deleted", "expired", "lost".
inline const char* WatchEventKindName(WatchEvent::Kind kind) {
  switch (kind) {
    case WatchEvent::Kind::kPublished:
      return "published";
    case WatchEvent::Kind::kReplaced:
      return "replaced";
    case WatchEvent::Kind::kDeleted:
      return "deleted";
    case WatchEvent::Kind::kExpired:
      return "expired";
    case WatchEvent::Kind::kLost:
      return "lost";
  }
  return "unknown";
}

// One memory pool of the daemon: its CPU shared memory, or one GPU's device memory.
struct PoolUsage {
  DLDevice device{kDLCPU, 0};   // CUDA: the daemon's ordinal
  uint64_t capacity_bytes = 0;  // --capacity or --cuda-capacity
  uint64_t used_bytes = 0;      // allocated to tensors
  uint64_t reserved_bytes = 0;  // of segments or slabs
  uint64_t segments = 0;        // shared-memory segments or CUDA slabs
  // How this process reaches the memory: "memfd" (CPU), "cuda-vmm" (POSIX descriptors of CUDA
  // VMM allocations) or "cuda-ipc" (legacy CUDA IPC handles); empty from an older daemon.
  std::string handles;
};

// One gRPC method's calls since the daemon started (Stats): counts by status code and a latency
// histogram (streams that last a session are counted, not timed).
struct MethodStats {
  std::string method;                           // "Create", ..., or "unknown" (not an API method)
  std::vector<std::pair<int, uint64_t>> calls;  // (grpc status code, count), by code
  std::vector<double> bucket_bounds_seconds;    // upper bounds; +Inf is the last count
  std::vector<uint64_t> bucket_counts;          // per bucket, not cumulative; one more
  double latency_sum_seconds = 0;
  uint64_t latency_count = 0;
};

// Daemon-wide counters (Stats). The top-level byte and segment figures are the CPU pool's.
struct UserUsage {
  uint32_t uid = 0;
  std::string user;  // the uid's name on the daemon's host; empty when unknown
  uint64_t bytes = 0;
  uint64_t tensors = 0;
  uint64_t quota_bytes = 0;    // 0: unlimited
  uint64_t quota_tensors = 0;  // 0: unlimited
};

// What one peer (another broker, named by its certificate's first name) did with this one.
struct PeerUsage {
  std::string peer;
  uint64_t calls = 0;       // calls it made on --peer-listen
  uint64_t sent_bytes = 0;  // tensor bytes sent to it (Read streams)
};

// What this broker holds and fetched of one remote[PREFIX] address's tensors.
struct RemoteUsage {
  std::string peer;             // the remote[PREFIX] address, as configured
  uint64_t replicas = 0;        // replicas held now
  uint64_t replica_bytes = 0;   // their bytes
  uint64_t fetches = 0;         // fetched since the start (first fetches and refreshes)
  uint64_t fetched_bytes = 0;   // bytes they brought
  uint64_t fetch_failures = 0;  // fetches that failed
  uint64_t evictions = 0;       // replicas unpublished to make room
};

struct BrokerStats {
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t reserved_bytes = 0;
  uint64_t tensors = 0;
  uint64_t leases = 0;
  uint64_t clients = 0;
  uint64_t segments = 0;
  uint64_t pending = 0;
  uint64_t waiting_gets = 0;         // Gets waiting for their name to be published (every client's)
  uint64_t watchers = 0;             // Watch streams open (every client's)
  std::vector<PoolUsage> pools;      // CPU first, then each GPU the daemon serves
  std::vector<MethodStats> methods;  // by method name
  // What each user holds (every version in memory they created), with their quota (0: none).
  // An administrator sees every user; anyone else only themselves.
  std::vector<UserUsage> users;  // by uid
  // Every peer that called since the daemon started, by name (administrators only).
  std::vector<PeerUsage> peers;
  // Every remote[PREFIX] address fetched from or held (administrators only).
  std::vector<RemoteUsage> remotes;
};

}  // namespace tensorbroker

#endif  // TENSORBROKER_TYPES_H_
