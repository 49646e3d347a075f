// The local channel's server (proto/tensorbroker/v1/local.proto): a SOCK_SEQPACKET Unix socket
// beside the gRPC socket, serving the hot calls (Get with its wait, Create, Seal, Abort, Retain,
// batched Release) and handing segment descriptors over with SCM_RIGHTS.
//
// Threads: an AcceptThread accepts (recording SO_PEERCRED) and passes each connection to one
// event-loop thread, which owns every LocalConnection and does all their socket I/O. A waiting
// Get holds no thread: the store calls back (from whichever thread published the name) into a
// queue that the loop drains; its deadline is a timer of the loop. Session events (segments
// removed) arrive the same way. What the loop thread hands itself (a Seal answering waits on
// the loop) needs no eventfd wake; and a Seal's answers to other connections' waits and
// watches go out before the Seal's own reply (AnswerOthersFirst), so consumers wake first.
// Back-pressure: a connection whose replies are queued is not read until they are sent, and one
// whose next reply waits for its client to receive earlier descriptors (descriptor_ledger.h)
// is watched edge-triggered for the client's reads.
// Stop() (or the destructor) stops accepting, closes every connection (ending the sessions
// they opened) and joins both threads; call it before the store goes.
#ifndef TENSORBROKER_DAEMON_LOCAL_CHANNEL_SERVER_H_
#define TENSORBROKER_DAEMON_LOCAL_CHANNEL_SERVER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "common/unique_fd.h"
#include "daemon/base/listen_fds.h"
#include "daemon/frontend/local/descriptor_ledger.h"
#include "daemon/frontend/local/local_connection.h"
#include "daemon/net/accept_thread.h"
#include "daemon/net/connection_limits.h"
#include "daemon/store/tensor_store.h"

namespace tensorbroker::daemon {

// What the daemon does when a successor asks to take over (handover.h), on the loop thread.
struct HandoverHooks {
  // Stops serving (the local channel has stopped accepting already) and returns what the
  // successor needs. Unset: takeovers are refused (UNIMPLEMENTED).
  std::function<absl::StatusOr<std::vector<NamedFd>>()> prepare;
  // The hand-over went out, or failed to (the status): either way this daemon is done.
  std::function<void(const absl::Status&)> finished;
};

class LocalChannelServer final : public LocalConnectionHost {
 public:
  // Starts serving `store`, which must outlive Stop(), on `listener` (a listening
  // SOCK_SEQPACKET socket, non-blocking: unix_listener.h).
  // `metrics` (may be null) counts the calls, and must outlive Stop() too.
  // `policy` turns each connection's credentials into its principal; it must outlive Stop().
  // Connections over `settings.max_connections` are closed at once, and those that open or
  // attach no session within `settings.handshake_timeout` are closed then.
  static absl::StatusOr<std::unique_ptr<LocalChannelServer>> Start(
      UniqueFd listener, TensorStore* store, CallMetrics* metrics, const AccessPolicy* policy,
      const ConnectionSettings& settings, HandoverHooks handover = {});
  ~LocalChannelServer() override;
  LocalChannelServer(const LocalChannelServer&) = delete;
  LocalChannelServer& operator=(const LocalChannelServer&) = delete;

  // Idempotent. The socket file stays (the caller unlinks it).
  void Stop();

  std::string OpenOwnedSession(uint64_t id, int32_t pid, const std::string& client_name,
                               const Principal& principal) override;
  std::optional<absl::StatusOr<TensorGrant>> StartWait(uint64_t id, const std::string& session_id,
                                                       const std::string& name,
                                                       const VersionWanted& wanted,
                                                       absl::Time deadline,
                                                       uint64_t* waiter_id) override;
  void WaitEnded(uint64_t id, uint64_t waiter_id, absl::Time deadline) override;
  std::function<void()> WatchWaker(uint64_t id) override;
  void AnswerOthersFirst(uint64_t id) override;
  absl::StatusOr<std::vector<NamedFd>> PrepareHandover(const PeerCredentials& peer) override;
  void HandoverSent(const absl::Status& sent) override;
  void ReclaimDescriptors(uid_t uid) override;

 private:
  // Something another thread handed to the loop.
  struct Handoff {
    enum class Kind { kConnection, kWaitAnswered, kSegmentRemoved, kWatchReady };
    Kind kind = Kind::kConnection;
    uint64_t connection_id = 0;
    UniqueFd socket;                                              // kConnection
    PeerCredentials peer;                                         // kConnection
    uint64_t waiter_id = 0;                                       // kWaitAnswered
    std::string session_id;                                       // kWaitAnswered
    absl::StatusOr<TensorGrant> result = absl::UnknownError("");  // kWaitAnswered
    std::string segment;                                          // kSegmentRemoved
  };
  class SessionSink;
  // What a watch's wake reaches: this server until it is destroyed (wakes may come later).
  struct WakeTarget {
    Mutex mu;
    LocalChannelServer* server ABSL_GUARDED_BY(mu) = nullptr;
  };

  LocalChannelServer(TensorStore* store, CallMetrics* metrics, const AccessPolicy* policy,
                     const ConnectionSettings& settings, HandoverHooks handover, UniqueFd epoll,
                     UniqueFd wake);
  void Hand(Handoff handoff);
  void Loop();
  // Handles what other threads handed over, in order; those for connection `except` (being
  // served now: it must not be dropped under its own feet) go back to the queue's front.
  void TakeHandoffs(std::optional<uint64_t> except = std::nullopt);
  void ExpireWaits();
  // Closes the connections that have no session past the handshake timeout.
  void ExpireHandshakes();
  void Serve(LocalConnection* connection, uint32_t events);
  void Drop(uint64_t connection_id);
  // Sets the connection's epoll interest: its requests (nothing queued), room to write
  // (replies queued), or edge-triggered room (stalled on descriptors: each read by the client
  // wakes it once).
  void WatchWrites(LocalConnection* connection);
  // Lets the stalled connections of uids whose descriptors were refunded send again.
  void ResumeStalled();
  int NextTimeoutMs() const;

  TensorStore* const store_;
  const AccessPolicy* const policy_;
  const ConnectionSettings settings_;
  ConnectionLimit limit_;
  // Admitted by the acceptor and not yet dropped by the loop (handed-over ones included).
  std::atomic<size_t> open_connections_{0};
  CallMetrics* const metrics_;
  const UniqueFd epoll_;
  const UniqueFd wake_;  // eventfd: handoffs and Stop
  const HandoverHooks handover_;
  std::unique_ptr<AcceptThread> acceptor_;  // set by Start before any connection is served
  std::thread loop_;
  const std::shared_ptr<WakeTarget> wake_target_ = std::make_shared<WakeTarget>();

  Mutex mu_;
  std::vector<Handoff> handoffs_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_connection_id_ ABSL_GUARDED_BY(mu_) = 1;

  // The loop thread's own.
  std::map<uint64_t, std::unique_ptr<LocalConnection>> connections_;
  std::map<uint64_t, std::unique_ptr<SessionSink>>
      sinks_;  // of sessions opened here, by connection
  std::multimap<absl::Time, std::pair<uint64_t, uint64_t>> deadlines_;  // -> connection, waiter
  std::multimap<absl::Time, uint64_t> handshakes_;  // deadline -> connection without a session
  DescriptorLedger ledger_;
  std::set<uint64_t> stalled_;  // connections whose next reply waits on the ledger
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_LOCAL_CHANNEL_SERVER_H_
