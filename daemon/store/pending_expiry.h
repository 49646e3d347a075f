// Calls TensorStore::ExpirePending periodically on a DeadlineTimer (every tenth of the pending
// timeout, between 10 ms and 1 s), until Stop or destruction, which waits for a run in progress.
// The store and the timer must outlive it. Thread-safe: runs on the timer's thread; Stop from any
// other.
#ifndef TENSORBROKER_DAEMON_PENDING_EXPIRY_H_
#define TENSORBROKER_DAEMON_PENDING_EXPIRY_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "daemon/base/deadline_timer.h"
#include "daemon/store/tensor_store.h"

namespace tensorbroker::daemon {

class PendingExpiry {
 public:
  PendingExpiry(TensorStore* store, DeadlineTimer* timer, absl::Duration timeout);
  ~PendingExpiry() { Stop(); }
  PendingExpiry(const PendingExpiry&) = delete;
  PendingExpiry& operator=(const PendingExpiry&) = delete;

  // Idempotent.
  void Stop();

 private:
  void ScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RunOnce();  // on the timer's thread: one ExpirePending, then the next schedule

  TensorStore* const store_;
  DeadlineTimer* const timer_;
  const absl::Duration period_;
  Mutex mu_;
  CondVar idle_;
  uint64_t next_ ABSL_GUARDED_BY(mu_) = 0;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_PENDING_EXPIRY_H_
