// The server side of one client's Session stream. Opening the stream opens a session in the
// TensorStore; the stream ending for any reason (the client closed it, its process died and
// the kernel closed the socket, the daemon shuts down) closes the session, which releases every
// lease it held and aborts its unsealed tensors.
//
// Lifetime: created by gRPC's callback API for each Session call, deletes itself in OnDone.
// Threading: gRPC calls the On* methods from its own threads; the TensorStore calls
// OnSegmentRemoved with its lock held. A mutex guards the write queue and the finished flag.
#ifndef TENSORBROKER_DAEMON_SESSION_REACTOR_H_
#define TENSORBROKER_DAEMON_SESSION_REACTOR_H_

#include <grpcpp/grpcpp.h>

#include <deque>
#include <optional>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "daemon/identity/principal.h"
#include "daemon/store/tensor_store.h"
#include "tensorbroker/v1/broker.pb.h"

namespace tensorbroker::daemon {

class SessionRegistry;

class SessionReactor final : public grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionEvent>,
                             public SessionEventSink {
 public:
  // `client` names the peer in log lines ("pid=123 uid=1000"); `principal` is the connection's,
  // the session's owner (an error when unknown: the stream is refused with it).
  SessionReactor(TensorStore* store, SessionRegistry* registry, std::string client,
                 const absl::StatusOr<Principal>& principal);

  // Ends the stream with `status` (used on shutdown). Safe to call more than once.
  void FinishWith(const grpc::Status& status);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;
  void OnSegmentRemoved(const std::string& segment) override;

 private:
  void QueueLocked(v1::SessionEvent event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CloseSession();

  TensorStore* const store_;
  SessionRegistry* const registry_;
  const std::string client_;
  std::string session_id_;
  v1::SessionRequest request_;
  Mutex mu_;
  std::deque<v1::SessionEvent> writes_ ABSL_GUARDED_BY(mu_);  // front() is in flight
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool session_closed_ ABSL_GUARDED_BY(mu_) = false;
};

// All live session streams, so shutdown can end them. Thread-safe.
class SessionRegistry {
 public:
  void Add(SessionReactor* reactor);
  void Remove(SessionReactor* reactor);
  // Finishes every live stream and refuses new ones from now on.
  void FinishAll(const grpc::Status& status);
  bool closed();

 private:
  Mutex mu_;
  std::set<SessionReactor*> reactors_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_SESSION_REACTOR_H_
