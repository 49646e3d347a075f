// Runs callbacks at deadlines on one thread of its own: the gRPC service times out waiting Gets
// with it (a wait holds an entry here, not a thread), and the daemon expires pending tensors.
// Callbacks run one at a time, in deadline order, without the timer's lock held; they may
// Schedule and Cancel. Thread-safe. The destructor stops the thread; callbacks not yet due
// never run.
#ifndef TENSORBROKER_DAEMON_DEADLINE_TIMER_H_
#define TENSORBROKER_DAEMON_DEADLINE_TIMER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/mutex.h"

namespace tensorbroker::daemon {

class DeadlineTimer {
 public:
  DeadlineTimer();
  ~DeadlineTimer();
  DeadlineTimer(const DeadlineTimer&) = delete;
  DeadlineTimer& operator=(const DeadlineTimer&) = delete;

  // Runs `callback` at `deadline` (at once if it has passed); returns an id for Cancel.
  uint64_t Schedule(absl::Time deadline, std::function<void()> callback);
  // True when the callback had not started and now never will.
  bool Cancel(uint64_t id);
  // Callbacks scheduled and not yet run or cancelled.
  size_t pending() const;

 private:
  void Run();

  mutable Mutex mu_;
  CondVar changed_;
  // (deadline, id) -> callback; the earliest first.
  std::map<std::pair<absl::Time, uint64_t>, std::function<void()>> entries_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, absl::Time> deadlines_ ABSL_GUARDED_BY(mu_);  // by id
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the rest is built
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_DEADLINE_TIMER_H_
