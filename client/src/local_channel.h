// The client end of the local channel (proto/tensorbroker/v1/local.proto): one SOCK_SEQPACKET
// connection per Connection, attached to its gRPC session, carrying the hot calls and the
// segment descriptors.
//
// Calls may come from many threads at once: each sends its request and waits for the reply
// with its request id. Whichever waiting thread finds no one reading the socket reads it and
// hands replies to their callers (leader/follower), so a single-threaded caller pays no thread
// hand-off. A Get that waits for its name holds only its caller.
// Releases are queued (QueueRelease never waits) and leave with the next request, or after at
// most kReleaseDelay on a flusher thread, batched; they always precede later requests on the
// wire, so a Get after a release finds it done. While releases keep coming the flusher stays
// awake (ticking every kReleaseDelay, for at most kFlusherLinger after the last one), so a
// release costs a push onto a vector, not a thread wake-up.
// Thread-safe. The destructor sends what is still queued.
#ifndef TENSORBROKER_CLIENT_SRC_LOCAL_CHANNEL_H_
#define TENSORBROKER_CLIENT_SRC_LOCAL_CHANNEL_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "common/unique_fd.h"
#include "tensorbroker/v1/local.pb.h"

namespace tensorbroker::client_internal {

inline constexpr std::chrono::microseconds kReleaseDelay{500};
inline constexpr std::chrono::milliseconds kFlusherLinger{100};

// A reply and the descriptors that came beside it (one per reply.descriptors(), in order).
struct LocalAnswer {
  v1::LocalReply reply;
  std::vector<UniqueFd> fds;
};

// Largest reply the daemon sends.
inline constexpr size_t kMaxReplyBytes = 256 << 10;

// A connection to the local channel at `path` whose server this client trusts: UNAVAILABLE if no
// daemon listens there, FAILED_PRECONDITION (before anything is sent) if the server's uid is not
// trusted (common/server_identity.h).
absl::StatusOr<UniqueFd> ConnectLocalChannel(const std::string& path);

class LocalChannel {
 public:
  // Connects to `path` and attaches `session_id`. UNAVAILABLE if no daemon listens there,
  // PERMISSION_DENIED as the daemon says, FAILED_PRECONDITION (before anything is sent) if the
  // server's uid is not trusted (common/server_identity.h). `session_unknown` (may be null) is
  // set when the daemon answered FAILED_PRECONDITION: it has no such session.
  static absl::StatusOr<std::unique_ptr<LocalChannel>> Attach(const std::string& path,
                                                              const std::string& session_id,
                                                              bool* session_unknown = nullptr);
  ~LocalChannel();
  LocalChannel(const LocalChannel&) = delete;
  LocalChannel& operator=(const LocalChannel&) = delete;

  // Sends `request` (its request_id is set here) and waits for the reply. A reply with a
  // non-OK code is returned as that status; its descriptors are closed then.
  absl::StatusOr<LocalAnswer> Call(v1::LocalRequest request);
  // The same; `on_sent(request_id)` runs once the request is on the wire, before the wait (a
  // Get arms its cancellation there: CancelWait needs the id).
  absl::StatusOr<LocalAnswer> Call(v1::LocalRequest request,
                                   const std::function<void(uint64_t)>& on_sent);
  // Asks the daemon to end the wait of Get `request_id` (sent at once, no reply of its own):
  // that Get's reply then comes with CANCELLED, unless its answer was on its way already.
  void CancelWait(uint64_t request_id);

  // Ends a lease soon, without waiting. Never fails: if the daemon is gone, so is the lease.
  void QueueRelease(uint64_t lease_id);
  // Returns once the daemon has taken every release queued so far (a round trip if any is).
  absl::Status Sync();
  // Tells the daemon with the next request that this process closed `segment`'s descriptors.
  void QueueDropped(const std::string& segment);

 private:
  explicit LocalChannel(UniqueFd socket);
  // Moves what is queued into `request`; call with send_mu_ held.
  void DrainQueuesLocked(v1::LocalRequest* request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(send_mu_);
  absl::Status SendLocked(const v1::LocalRequest& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(send_mu_);
  absl::StatusOr<LocalAnswer> Await(uint64_t request_id);
  void FlushLoop();

  const UniqueFd socket_;

  Mutex send_mu_;  // one request on the wire at a time; guards queues
  uint64_t next_request_id_ ABSL_GUARDED_BY(send_mu_) = 1;
  // The flusher's last send went out before every request with this id or more: once one of
  // them is answered, the daemon has done those releases. 0: nothing flushed.
  uint64_t flushed_before_ ABSL_GUARDED_BY(send_mu_) = 0;
  std::atomic<uint64_t> answered_{0};  // the highest request id answered
  std::vector<uint64_t> releases_ ABSL_GUARDED_BY(send_mu_);
  std::vector<std::string> dropped_ ABSL_GUARDED_BY(send_mu_);
  bool stopping_ ABSL_GUARDED_BY(send_mu_) = false;
  bool flusher_ticking_ ABSL_GUARDED_BY(send_mu_) = false;  // it will look again soon
  CondVar queued_cv_;  // with send_mu_: something was queued, or stopping

  Mutex read_mu_;
  CondVar read_cv_;  // a reply arrived, or the reader changed
  bool reading_ ABSL_GUARDED_BY(read_mu_) = false;
  absl::Status broken_ ABSL_GUARDED_BY(read_mu_);                      // the connection failed
  std::map<uint64_t, LocalAnswer> arrived_ ABSL_GUARDED_BY(read_mu_);  // replies not yet taken

  std::thread flusher_;
};

}  // namespace tensorbroker::client_internal

#endif  // TENSORBROKER_CLIENT_SRC_LOCAL_CHANNEL_H_
