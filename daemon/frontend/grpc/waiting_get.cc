#include "daemon/frontend/grpc/waiting_get.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/mutex.h"

namespace tensorbroker::daemon {

WaitingGet::WaitingGet(TensorStore* store, DeadlineTimer* timer, Answer answer)
    : store_(store), timer_(timer), answer_(std::move(answer)) {}

void WaitingGet::Start(const std::string& session_id, const std::string& name,
                       const VersionWanted& wanted, absl::Time deadline) {
  uint64_t waiter_id = 0;
  absl::Time until = deadline;  // later for a peer's tensor being fetched
  auto now = store_->GetOrWait(
      session_id, name, wanted, deadline, &waiter_id,
      [this](absl::StatusOr<TensorGrant> result) { Complete(std::move(result)); }, &until);
  if (now.has_value()) {
    Complete(*std::move(now));
    return;
  }
  waiter_id_ = waiter_id;
  // Captures only what stays valid: `this` is touched only after winning the waiter, which
  // means nobody has finished the call yet.
  const uint64_t timer_id =
      timer_->Schedule(until, [this, store = store_, waiter_id, name, wanted] {
        if (store->CancelWait(waiter_id)) Complete(WaitRanOut(name, wanted));
      });
  MutexLock lock(mu_);
  timer_id_ = timer_id;
  if (completed_) timer_->Cancel(timer_id);  // answered while the timer was being set
}

void WaitingGet::OnCancel() {
  const uint64_t waiter_id = waiter_id_.load();
  if (waiter_id != 0 && store_->CancelWait(waiter_id)) {
    Complete(absl::CancelledError("the client cancelled the Get while it waited"));
  }
}

void WaitingGet::Complete(absl::StatusOr<TensorGrant> result) {
  uint64_t timer_id = 0;
  {
    MutexLock lock(mu_);
    completed_ = true;
    timer_id = timer_id_;
  }
  if (timer_id != 0) timer_->Cancel(timer_id);
  Finish(answer_(std::move(result)));
}

}  // namespace tensorbroker::daemon
