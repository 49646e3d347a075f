// What the store reports, in types of its own: the client library's public structs are the
// client's, and daemon/wire/store_proto.h turns these into the wire messages. Values only; no
// ownership, no threading concerns.
#ifndef TENSORBROKER_DAEMON_STORE_TYPES_H_
#define TENSORBROKER_DAEMON_STORE_TYPES_H_

#include <dlpack/dlpack.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tensorbroker::daemon {

// One version of a name as the store sees it (Stat, List, Put, Seal, Get's grant, a watch event,
// a journal record).
// Where a replica came from (brokers across nodes): the peer that holds the original, and the
// original's version there (a replica's own version is this broker's, like any tensor's).
struct ReplicaOrigin {
  std::string peer;             // the remote[PREFIX] address it was fetched from, as configured
  std::string target;           // the broker that answered ("ipv4:10.0.0.2:7070"); not shown
  uint64_t version = 0;         // the origin's version
  int64_t fetched_unix_ms = 0;  // when this copy arrived
};

struct TensorView {
  std::string name;
  DLDataType dtype{};
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // in elements
  uint64_t nbytes = 0;
  DLDevice device{kDLCPU, 0};  // CUDA: the daemon's ordinal
  bool sealed = false;
  bool is_mutable = false;
  uint64_t version = 0;
  uint32_t leases = 0;
  int64_t created_unix_ms = 0;
  uint32_t owner_uid = 0;            // the uid that published the name first
  std::vector<std::string> readers;  // {"*"} or "uid:N" / "gid:N" entries
  uint32_t keep = 1;                 // versions of the name kept readable by number
  // The kept versions the caller may read, ascending (the last is the current one); empty for a
  // pending tensor, a grant, an event and a journal record.
  std::vector<uint64_t> kept_versions;
  bool ephemeral = false;               // deleted when the creating session ends
  std::optional<ReplicaOrigin> origin;  // set for a replica of another broker's tensor
};

// One entry of the watch log (watch_hub.h), for a watcher that may see it. Sequences are the
// store's version counter: a publication's is the new version; a deletion or an expiry takes a
// number of its own.
struct StoreEvent {
  // As v1.WatchEvent.Kind: a first version, a newer one, the name unpublished, a version out of
  // the kept history, or a gap the watcher may have missed (its sequences lost_first..lost_last).
  enum class Kind { kPublished, kReplaced, kDeleted, kExpired, kLost };
  Kind kind = Kind::kPublished;
  uint64_t sequence = 0;          // kLost: lost_last
  std::string name;               // empty for kLost
  uint64_t version = 0;           // the version concerned (kDeleted: the current one)
  uint64_t previous_version = 0;  // kReplaced: the version it replaced
  TensorView info;                // that version as at the event (leases 0); kLost: none
  uint64_t lost_first = 0;
  uint64_t lost_last = 0;
};

// The store's counters for Stats. The members carry the names of common/stats_schema.h's rows
// (its row templates point into these structs too), so the schema stays the one list.
struct StoreStats {
  // One memory pool: CPU shared memory, or one GPU's device memory.
  struct Pool {
    DLDevice device{kDLCPU, 0};  // CUDA: the daemon's ordinal
    uint64_t capacity_bytes = 0;
    uint64_t used_bytes = 0;
    uint64_t reserved_bytes = 0;  // of segments or slabs
    uint64_t segments = 0;        // shared-memory segments or CUDA slabs
    std::string handles;          // PoolStats::handles (memory_pool.h)
  };
  // What one uid holds (every version in memory it created), and its quota (0: none).
  struct User {
    uint32_t uid = 0;
    std::string user;  // filled by the front end (the uid's name); empty when unknown
    uint64_t bytes = 0;
    uint64_t tensors = 0;
    uint64_t quota_bytes = 0;
    uint64_t quota_tensors = 0;
  };
  // What this store holds and fetched of one remote[PREFIX] address's tensors.
  struct Remote {
    std::string peer;  // the address, as configured
    uint64_t replicas = 0;
    uint64_t replica_bytes = 0;
    uint64_t fetches = 0;
    uint64_t fetched_bytes = 0;
    uint64_t fetch_failures = 0;
    uint64_t evictions = 0;
  };
  // The byte and segment figures are the CPU pool's.
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t reserved_bytes = 0;
  uint64_t tensors = 0;  // published names the caller may see
  uint64_t leases = 0;
  uint64_t clients = 0;
  uint64_t segments = 0;
  uint64_t pending = 0;
  uint64_t waiting_gets = 0;
  uint64_t watchers = 0;
  std::vector<Pool> pools;      // CPU first, then each GPU served
  std::vector<User> users;      // by uid: every user for an administrator, else the caller alone
  std::vector<Remote> remotes;  // by address, for an administrator only
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_STORE_TYPES_H_
