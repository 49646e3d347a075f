#include "daemon/store/pending_expiry.h"

#include <algorithm>

#include "absl/time/clock.h"

namespace tensorbroker::daemon {

PendingExpiry::PendingExpiry(TensorStore* store, DeadlineTimer* timer, absl::Duration timeout)
    : store_(store),
      timer_(timer),
      period_(std::clamp(timeout / 10, absl::Milliseconds(10), absl::Seconds(1))) {
  MutexLock lock(mu_);
  ScheduleLocked();
}

void PendingExpiry::Stop() {
  MutexLock lock(mu_);
  if (stopped_) return;
  stopped_ = true;
  timer_->Cancel(next_);
  while (running_) idle_.wait(lock);
}

void PendingExpiry::ScheduleLocked() {
  next_ = timer_->Schedule(absl::Now() + period_, [this] { RunOnce(); });
}

void PendingExpiry::RunOnce() {
  {
    MutexLock lock(mu_);
    if (stopped_) return;
    running_ = true;
  }
  store_->ExpirePending(absl::Now());
  MutexLock lock(mu_);
  running_ = false;
  idle_.notify_all();
  if (!stopped_) ScheduleLocked();
}

}  // namespace tensorbroker::daemon
