// Keeps replicas fresh. For each remote prefix and each broker that replicas under it came from,
// one Watch on that broker: opened after the oldest origin version held here (so what happened
// there since the fetch is replayed), resumed after the last event seen. A newer version of a
// name held here is fetched at once (`refresh`); a deletion there unpublishes the replica here
// (its holders keep their leases, as locally); a LOST gap, and every reconnect, re-checks each
// replica with a Stat (gone there: dropped; newer there: fetched). When the broker goes away
// the replicas keep serving, the watch reconnects with backoff (1 s, doubling to 30 s), and the
// log says both.
//
// Ownership: the channels, the store and whatever `refresh` calls outlive this. Threading: one
// thread per watch (at most kMaxReplicaWatches); Follow is thread-safe and does not block;
// Stop (or the destructor) cancels the calls in progress and joins the threads.
#ifndef TENSORBROKER_DAEMON_REPLICA_WATCHES_H_
#define TENSORBROKER_DAEMON_REPLICA_WATCHES_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "daemon/remote/peer_address.h"
#include "daemon/remote/peer_channels.h"
#include "daemon/store/tensor_store.h"
#include "tensorbroker/v1/broker.grpc.pb.h"

namespace tensorbroker::daemon {

inline constexpr size_t kMaxReplicaWatches = 256;
inline constexpr absl::Duration kFirstWatchBackoff = absl::Seconds(1);
inline constexpr absl::Duration kLastWatchBackoff = absl::Seconds(30);

class ReplicaWatches {
 public:
  // Fetches the current version of a name from its remote prefix's brokers (ReplicaFetcher).
  using Refresh = std::function<void(const std::string& name)>;

  ReplicaWatches(PeerChannels* channels, TensorStore* store, Refresh refresh);
  ~ReplicaWatches();
  ReplicaWatches(const ReplicaWatches&) = delete;
  ReplicaWatches& operator=(const ReplicaWatches&) = delete;

  // Makes sure the replicas under `prefix` (a remote[] key) that `origin` sent are watched.
  void Follow(const std::string& prefix, const PeerEndpoint& origin);
  // Idempotent.
  void Stop();

 private:
  struct Watch {
    std::string prefix;
    PeerEndpoint origin;
    std::string what;  // "the watch of 'shared/' at peer node-a:7070" for the log
    std::thread thread;
    // Events or answers of the origin about names that are not its own (ProtocolError); only
    // the watch's own thread touches it.
    mutable uint64_t protocol_errors = 0;
  };
  void Run(const Watch& watch);
  // One connection, until it ends: the stream from `*after` (advanced as events come), a
  // re-check first when `recheck`. Sets `*connected` once the broker answered.
  absl::Status Stream(const Watch& watch, std::optional<uint64_t>* after, bool recheck,
                      bool* connected);
  // OK when the broker answers a Ping.
  absl::Status Ping(v1::Broker::Stub& stub);
  // Stats every replica `watch` covers: dropped when gone there, fetched when newer there; logs
  // what it did after `why` ("is back").
  absl::Status Recheck(const Watch& watch, v1::Broker::Stub& stub, absl::string_view why);
  // One event: true when it asks for a re-check (LOST). An origin speaks only of the replicas
  // it sent, under the watched prefix; anything else is its protocol error, acted on never.
  bool Apply(const Watch& watch, const v1::WatchEvent& event);
  // Logs the origin's first protocol error of this watch as a warning (`what` it said), the
  // later ones at debug level with their count.
  void ProtocolError(const Watch& watch, absl::string_view what);
  // Sleeps `how_long`; false when stopping.
  bool Pause(absl::Duration how_long);

  PeerChannels* const channels_;
  TensorStore* const store_;
  const Refresh refresh_;
  Mutex mu_;
  CondVar stop_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool full_logged_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, std::unique_ptr<Watch>> watches_ ABSL_GUARDED_BY(mu_);  // prefix\ntarget
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_REPLICA_WATCHES_H_
