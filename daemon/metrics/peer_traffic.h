// What each peer (another broker on --peer-listen, named by its certificate's first name) asked
// of this one since the daemon started: its calls and the tensor bytes sent to it. Names come
// from certificates the CA signed, so they are few; past kMaxPeerNames the rest count together
// under kOtherPeers, so a CA that signs many names cannot make the daemon hold more.
//
// Thread-safe: the map behind a mutex; the counters are atomics, kept as long as the daemon, so
// a Read stream adds to its peer's without a lock.
#ifndef TENSORBROKER_DAEMON_PEER_TRAFFIC_H_
#define TENSORBROKER_DAEMON_PEER_TRAFFIC_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"

namespace tensorbroker::daemon {

inline constexpr size_t kMaxPeerNames = 1024;
inline constexpr char kOtherPeers[] = "(others)";

struct PeerCounters {
  std::atomic<uint64_t> calls{0};
  std::atomic<uint64_t> sent_bytes{0};
};

// One peer's counters at one moment (the rows of kPeerStatsRows).
struct PeerTrafficRow {
  std::string peer;
  uint64_t calls = 0;
  uint64_t sent_bytes = 0;
};

class PeerTraffic {
 public:
  // The counters of `peer`, made at its first call; valid as long as this object.
  PeerCounters* For(const std::string& peer);
  std::vector<PeerTrafficRow> Snapshot() const;  // by name

 private:
  mutable Mutex mu_;
  std::map<std::string, std::unique_ptr<PeerCounters>> by_name_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_PEER_TRAFFIC_H_
