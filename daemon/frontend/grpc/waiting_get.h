// A Get as a gRPC callback reactor. When the name is not published yet, the wait is an entry
// in the store and one in the DeadlineTimer: no thread is held, and a cancelled wait is gone
// at once. Exactly one of these answers it: the store (published, session closed, shutting
// down), the timer (DEADLINE_EXCEEDED) or the client (CANCELLED): whoever removes the store's
// waiter first (TensorStore::CancelWait), or the store itself.
//
// Lifetime: made by BrokerService::Get, deletes itself in OnDone. gRPC runs OnDone only after
// the method handler returned and Finish was called, so Start may race with an answer safely.
// Threading: the store's callback, the timer and OnCancel may run on any thread; `mu_` guards
// the timer entry.
#ifndef TENSORBROKER_DAEMON_WAITING_GET_H_
#define TENSORBROKER_DAEMON_WAITING_GET_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "daemon/base/deadline_timer.h"
#include "daemon/store/tensor_store.h"

namespace tensorbroker::daemon {

class WaitingGet final : public grpc::ServerUnaryReactor {
 public:
  // Turns the outcome into the call's response and status (and logs it); runs exactly once.
  using Answer = std::function<grpc::Status(absl::StatusOr<TensorGrant>)>;

  WaitingGet(TensorStore* store, DeadlineTimer* timer, Answer answer);
  // Asks the store; call once, from the method handler.
  void Start(const std::string& session_id, const std::string& name, const VersionWanted& wanted,
             absl::Time deadline);

  void OnCancel() override;
  void OnDone() override { delete this; }

 private:
  void Complete(absl::StatusOr<TensorGrant> result);

  TensorStore* const store_;
  DeadlineTimer* const timer_;
  const Answer answer_;
  std::atomic<uint64_t> waiter_id_{0};  // set by Start, before any OnCancel
  Mutex mu_;
  uint64_t timer_id_ ABSL_GUARDED_BY(mu_) = 0;
  bool completed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_WAITING_GET_H_
