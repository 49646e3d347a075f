// One client connection on the local channel (see proto/tensorbroker/v1/local.proto): its
// kernel credentials, the session it opened or attached, which segment descriptors it has been
// sent, its waiting Gets, and the replies not yet taken by its socket.
//
// Bounded per client: while replies are queued the server reads no more of its requests
// (back-pressure); a queued reply holds no descriptor (the segment's descriptor is duplicated
// only as the reply goes out); and the descriptors sent but not yet received by the client are
// bounded per connection and per uid (descriptor_ledger.h): past that, replies wait for the
// client to read.
//
// Threading: owned and driven by the LocalChannelServer's event loop thread only; nothing here
// is touched from another thread. The store calls back into the server (waits, events), never
// into a connection.
#ifndef TENSORBROKER_DAEMON_LOCAL_CONNECTION_H_
#define TENSORBROKER_DAEMON_LOCAL_CONNECTION_H_

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/unique_fd.h"
#include "daemon/base/listen_fds.h"
#include "daemon/frontend/local/descriptor_ledger.h"
#include "daemon/identity/peer_registry.h"
#include "daemon/metrics/call_metrics.h"
#include "daemon/store/access_policy.h"
#include "daemon/store/tensor_store.h"
#include "tensorbroker/v1/local.pb.h"

namespace tensorbroker::daemon {

// Most replies a connection may leave queued before it is dropped (a safety net: with
// back-pressure only its waits' answers, its watches' window and segment events can queue).
inline constexpr size_t kMaxQueuedReplies = 4096;
// Most Gets one connection may have waiting at once (the store bounds each uid's too).
inline constexpr size_t kMaxWaitsPerConnection = 1024;
// Largest request datagram.
inline constexpr size_t kMaxLocalRequestBytes = 64 << 10;
// Most replies a connection's watches queue beyond what its socket holds: a watcher that does
// not read is left behind in the store's log (and told with a LOST event), never queued for.
inline constexpr size_t kWatchWindow = 16;

// What the connection asks of the server that owns it.
class LocalConnectionHost {
 public:
  virtual ~LocalConnectionHost() = default;
  // Opens a session owned by connection `id` (its segment events come back as EventFor).
  virtual std::string OpenOwnedSession(uint64_t id, int32_t pid, const std::string& client_name,
                                       const Principal& principal) = 0;
  // Starts a wait for connection `id`: GetOrWait with a callback that queues the answer.
  virtual std::optional<absl::StatusOr<TensorGrant>> StartWait(
      uint64_t id, const std::string& session_id, const std::string& name,
      const VersionWanted& wanted, absl::Time deadline, uint64_t* waiter_id) = 0;
  // The wait `waiter_id` of connection `id` (due at `deadline`) ended: answered, timed out,
  // cancelled, or its connection closed. Forget its deadline.
  virtual void WaitEnded(uint64_t id, uint64_t waiter_id, absl::Time deadline) = 0;
  // The wake of a watch of connection `id` (TensorStore::Watch): makes the loop call
  // PumpWatches. Callable from any thread, at any time (also after the connection went).
  virtual std::function<void()> WatchWaker(uint64_t id) = 0;
  // Connection `id` published something (Seal): answer the other connections' waits and pump
  // their watches now, before its own reply goes out, so the consumers wake first (the
  // producer's reply can wait a few microseconds; on a small machine a woken producer would
  // take the CPU a consumer needs).
  virtual void AnswerOthersFirst(uint64_t id) = 0;
  // A takeover (handover.h) by a caller the connection admitted: stops serving and returns what
  // the successor needs; then HandoverSent once it went out (or failed to).
  virtual absl::StatusOr<std::vector<NamedFd>> PrepareHandover(const PeerCredentials& peer) = 0;
  virtual void HandoverSent(const absl::Status& sent) = 0;
  // The connections of `uid` refund the descriptors their clients have received
  // (LocalConnection::ReclaimReceived): one of them is at the uid's bound.
  virtual void ReclaimDescriptors(uid_t uid) = 0;
};

class LocalConnection {
 public:
  // `metrics` (may be null) counts every call as the gRPC service's interceptor does.
  // `policy` makes the connection's principal from `peer` and admits what it creates.
  // `ledger` (the server's, outliving the connection) counts its descriptors in flight.
  LocalConnection(uint64_t id, UniqueFd socket, PeerCredentials peer, const AccessPolicy* policy,
                  TensorStore* store, LocalConnectionHost* host, CallMetrics* metrics,
                  DescriptorLedger* ledger);
  // Cancels waits and closes a session this connection opened.
  ~LocalConnection();
  LocalConnection(const LocalConnection&) = delete;
  LocalConnection& operator=(const LocalConnection&) = delete;

  uint64_t id() const { return id_; }
  int fd() const { return socket_.get(); }
  const PeerCredentials& peer() const { return peer_; }
  // Whether it opened or attached a session yet.
  bool has_session() const { return !session_id_.empty(); }

  // Reads one datagram from the socket (the server's loop found it readable) and handles it:
  // a request too long or carrying descriptors is refused and the connection serves on; no
  // datagram after all (EAGAIN) does nothing. False when the connection must be dropped (the
  // client closed it, or a reply cannot be sent).
  bool ReadRequest();
  // Handles one request datagram. False when the connection must be dropped.
  bool HandleRequest(const std::string& bytes);
  // Waiting Gets, by the store's waiter id.
  struct Wait {
    uint64_t request_id = 0;
    absl::Time start;
    absl::Time deadline;
    std::string name;
    VersionWanted wanted;
  };
  const std::map<uint64_t, Wait>& waits() const { return waits_; }
  // Answers the wait `waiter_id` (its deadline passed, or the store answered it).
  bool FinishWait(uint64_t waiter_id, absl::StatusOr<TensorGrant> result);
  // The daemon removed `segment`: tell the client (sessions opened here) and forget it.
  bool SegmentRemoved(const std::string& segment);
  // Sends its watches' events while fewer than kWatchWindow replies are queued (the rest when
  // the socket drains, or when the store wakes a parked watch). False when the connection must
  // be dropped.
  bool PumpWatches();

  // Sends queued replies until the socket is full or the next one's descriptors must wait
  // (stalled()); false when the connection must be dropped.
  bool Flush();
  // Replies are queued: the server reads no request of this connection until they are sent.
  bool wants_to_write() const { return !outgoing_.empty(); }
  // The next reply waits for the client to receive the descriptors sent before it.
  bool stalled() const { return stalled_; }
  // Refunds the descriptors in flight when the client has received everything (its socket's
  // send queue is empty).
  void ReclaimReceived();
  size_t descriptors_in_flight() const { return in_flight_; }
  uint32_t epoll_events = 0;  // the server's epoll interest, as last set

 private:
  // A segment descriptor a reply carries: duplicated only when the reply is sent.
  struct PendingDescriptor {
    uint64_t lease_id = 0;
    std::string segment;
    bool writable = false;
    // Set: not a lease's segment but one of the session's fast-read files (lease_id unused).
    std::optional<FastReadFile> fast_read;
  };
  struct Outgoing {
    v1::LocalReply reply;
    std::vector<PendingDescriptor> descriptors;
  };
  // Whether a reply with `count` descriptors may go now (descriptor_ledger.h).
  bool MaySendDescriptors(size_t count);
  // Sends `next` (its descriptors duplicated now, closed once sent); UNAVAILABLE: the socket is
  // full, try again later.
  absl::Status SendNow(const Outgoing& next, size_t* descriptors_sent);

  // Answers a datagram that could not be read as a request (request_id 0).
  bool Refuse(const absl::Status& status);
  // Ends the wait of the Get (or the watch) `request.cancel().request_id()`: answered CANCELLED
  // now, unless its answer is on its way already. False when the connection must be dropped.
  bool CancelWait(const v1::LocalRequest& request);
  // Starts a watch answered later (PumpWatches).
  absl::Status Watch(uint64_t request_id, const v1::WatchRequest& watch);
  // Ends the watch of `request_id` with a last reply of `status`.
  bool EndWatch(uint64_t request_id, const absl::Status& status);
  void Dispatch(const v1::LocalRequest& request, v1::LocalReply* reply,
                std::vector<PendingDescriptor>* descriptors);
  absl::Status NeedSession() const;
  // One handler per call; a non-OK status becomes the reply's code and message.
  absl::Status Open(const v1::LocalRequest::Open& open, v1::LocalReply* reply);
  absl::Status Attach(const v1::LocalRequest::Attach& attach, v1::LocalReply* reply);
  // OK with an empty reply when the Get waits (FinishWait answers it).
  absl::Status Get(uint64_t request_id, const v1::GetRequest& get, v1::LocalReply* reply,
                   std::vector<PendingDescriptor>* descriptors);
  absl::StatusOr<TensorGrant> Create(const v1::CreateRequest& create);
  absl::Status Seal(const v1::SealRequest& seal, v1::LocalReply* reply);
  absl::Status Abort(const v1::AbortRequest& abort, v1::LocalReply* reply);
  absl::Status FetchSegment(const v1::LocalRequest::FetchSegment& fetch, v1::LocalReply* reply,
                            std::vector<PendingDescriptor>* descriptors);
  absl::Status OpenFastReads(v1::LocalReply* reply, std::vector<PendingDescriptor>* descriptors);
  // Hands everything over to the caller, a new daemon of this one's uid or root (its replies
  // sent here, blocking); false when the connection must be dropped.
  bool TakeOver(uint64_t request_id);
  // A grant into the reply (see ReplyGrant), or its error.
  absl::Status Grant(absl::StatusOr<TensorGrant> grant, v1::LocalReply* reply,
                     std::vector<PendingDescriptor>* descriptors);
  // Puts the grant in `reply`, with its segment's descriptor if not sent before.
  void ReplyGrant(const TensorGrant& grant, v1::LocalReply* reply,
                  std::vector<PendingDescriptor>* descriptors);
  // Marks the segment of `descriptor` sent, and `descriptors` to carry it.
  void AttachDescriptor(PendingDescriptor descriptor, std::vector<PendingDescriptor>* descriptors);
  bool Send(v1::LocalReply reply, std::vector<PendingDescriptor> descriptors = {});
  // Counts and logs one finished call.
  void Account(v1::LocalRequest::CallCase call, const std::string& subject,
               const v1::LocalReply& reply, absl::Time start);
  std::string Client() const;

  const uint64_t id_;
  const UniqueFd socket_;
  const PeerCredentials peer_;
  const AccessPolicy* const policy_;
  const Principal principal_;
  TensorStore* const store_;
  LocalConnectionHost* const host_;
  CallMetrics* const metrics_;
  DescriptorLedger* const ledger_;
  std::string session_id_;
  bool owns_session_ = false;
  std::set<std::string> sent_read_only_;   // segments whose read-only descriptor was sent
  std::set<std::string> sent_read_write_;  // ... whose read-write descriptor was sent
  std::map<uint64_t, Wait> waits_;         // by waiter id
  std::map<uint64_t, uint64_t> watches_;   // request id -> the store's watcher id
  std::deque<Outgoing> outgoing_;
  size_t in_flight_ = 0;  // descriptors sent that the client may not have received
  bool stalled_ = false;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_LOCAL_CONNECTION_H_
