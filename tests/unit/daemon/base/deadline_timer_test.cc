// The daemon's deadline timer (daemon/base/deadline_timer.h): callbacks run on the timer's own
// thread, never before their deadline, one at a time and in deadline order; Cancel says whether
// it stopped one; callbacks may Schedule and Cancel; the destructor drops what is not due.
// Orders are made certain by a "gate", a callback that holds the timer's thread until the test
// lets it go, so that nothing here depends on how fast a machine is; the only wait for time is
// for a deadline to pass, and no test bounds how long anything takes.
#include "daemon/base/deadline_timer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace tensorbroker::daemon {
namespace {

// Notification's interface on std::mutex: Debian's Abseil is not built for TSan, which
// would not see Notification's happens-before edge and report the data it publishes.
class Notification {
 public:
  void Notify() {
    std::lock_guard<std::mutex> lock(mu_);
    notified_ = true;
    changed_.notify_all();
  }
  void WaitForNotification() {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait(lock, [this] { return notified_; });
  }
  bool HasBeenNotified() {
    std::lock_guard<std::mutex> lock(mu_);
    return notified_;
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  bool notified_ = false;
};

// A callback that holds the timer's thread: entered() once it runs, until Open().
class Gate {
 public:
  std::function<void()> Callback() {
    return [this] {
      entered_.Notify();
      open_.WaitForNotification();
    };
  }
  void WaitEntered() { entered_.WaitForNotification(); }
  void Open() {
    if (!open_.HasBeenNotified()) open_.Notify();
  }
  // Opens it if a failed assertion left it shut, so the timer's destructor can join.
  ~Gate() { Open(); }

 private:
  Notification entered_;
  Notification open_;
};

// What callbacks did, in the order they did it.
class Record {
 public:
  std::function<void()> Add(int value) {
    return [this, value] {
      std::lock_guard<std::mutex> lock(mu_);
      values_.push_back(value);
    };
  }
  std::vector<int> values() const {
    std::lock_guard<std::mutex> lock(mu_);
    return values_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<int> values_;
};

TEST(DeadlineTimer, APassedDeadlineRunsAtOnceOnTheTimersOwnThread) {
  DeadlineTimer timer;
  std::thread::id ran_on;
  Notification done;
  timer.Schedule(absl::Now() - absl::Seconds(1), [&] {
    ran_on = std::this_thread::get_id();
    done.Notify();
  });
  done.WaitForNotification();
  EXPECT_NE(ran_on, std::this_thread::get_id());
  EXPECT_EQ(timer.pending(), 0u);

  // The same thread for every callback: the timer has one of its own.
  std::thread::id next_on;
  Notification next_done;
  timer.Schedule(absl::InfinitePast(), [&] {
    next_on = std::this_thread::get_id();
    next_done.Notify();
  });
  next_done.WaitForNotification();
  EXPECT_EQ(next_on, ran_on);
}

TEST(DeadlineTimer, ACallbackNeverRunsBeforeItsDeadline) {
  DeadlineTimer timer;
  for (absl::Duration delay :
       {absl::Milliseconds(1), absl::Milliseconds(50), absl::Milliseconds(200)}) {
    SCOPED_TRACE(delay);
    const absl::Time deadline = absl::Now() + delay;
    absl::Time ran_at;
    Notification done;
    timer.Schedule(deadline, [&] {
      ran_at = absl::Now();
      done.Notify();
    });
    done.WaitForNotification();
    EXPECT_GE(ran_at, deadline);
  }
}

TEST(DeadlineTimer, CallbacksRunOneAtATimeInDeadlineOrderNotScheduleOrder) {
  DeadlineTimer timer;
  Gate gate;
  timer.Schedule(absl::InfinitePast(), gate.Callback());
  gate.WaitEntered();

  // All due while the gate holds the thread; none may start beside it.
  Record record;
  const absl::Time now = absl::Now();
  timer.Schedule(now - absl::Seconds(1), record.Add(3));
  timer.Schedule(now - absl::Seconds(3), record.Add(1));
  timer.Schedule(now - absl::Seconds(2), record.Add(2));
  Notification last;
  timer.Schedule(now - absl::Milliseconds(1), [&] { last.Notify(); });
  EXPECT_EQ(timer.pending(), 4u);
  EXPECT_EQ(record.values(), std::vector<int>{});

  gate.Open();
  last.WaitForNotification();
  EXPECT_EQ(record.values(), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(timer.pending(), 0u);
}

TEST(DeadlineTimer, AnEarlierDeadlineScheduledLaterIsNotHeldUpByALaterOne) {
  DeadlineTimer timer;
  std::atomic<bool> far_ran{false};
  timer.Schedule(absl::Now() + absl::Hours(1), [&] { far_ran = true; });
  Notification near_ran;
  timer.Schedule(absl::Now() + absl::Milliseconds(10), [&] { near_ran.Notify(); });
  near_ran.WaitForNotification();
  EXPECT_FALSE(far_ran);
  EXPECT_EQ(timer.pending(), 1u);
}

TEST(DeadlineTimer, PendingCountsWhatIsScheduledAndNeitherRunNorCancelled) {
  DeadlineTimer timer;
  EXPECT_EQ(timer.pending(), 0u);
  const uint64_t a = timer.Schedule(absl::Now() + absl::Hours(1), [] {});
  const uint64_t b = timer.Schedule(absl::Now() + absl::Hours(2), [] {});
  EXPECT_NE(a, b);
  EXPECT_EQ(timer.pending(), 2u);
  EXPECT_TRUE(timer.Cancel(a));
  EXPECT_EQ(timer.pending(), 1u);

  // A running callback is no longer pending.
  size_t pending_inside = 99;
  Notification done;
  timer.Schedule(absl::InfinitePast(), [&] {
    pending_inside = timer.pending();
    done.Notify();
  });
  done.WaitForNotification();
  EXPECT_EQ(pending_inside, 1u);
  EXPECT_EQ(timer.pending(), 1u);
}

TEST(DeadlineTimer, CancelStopsACallbackThatHasNotStarted) {
  DeadlineTimer timer;
  std::atomic<bool> ran{false};
  const uint64_t far = timer.Schedule(absl::Now() + absl::Hours(1), [&] { ran = true; });
  EXPECT_TRUE(timer.Cancel(far));
  EXPECT_FALSE(timer.Cancel(far));  // once only
  EXPECT_EQ(timer.pending(), 0u);

  // One already due, held back by the gate: cancelled, it never runs, though the callback
  // after it (a later deadline) does.
  Gate gate;
  timer.Schedule(absl::InfinitePast(), gate.Callback());
  gate.WaitEntered();
  const absl::Time now = absl::Now();
  const uint64_t due = timer.Schedule(now - absl::Seconds(2), [&] { ran = true; });
  Notification after;
  timer.Schedule(now - absl::Seconds(1), [&] { after.Notify(); });
  EXPECT_TRUE(timer.Cancel(due));
  gate.Open();
  after.WaitForNotification();
  EXPECT_FALSE(ran);
  EXPECT_EQ(timer.pending(), 0u);
}

TEST(DeadlineTimer, CancelIsFalseOnceACallbackHasStartedOrRunOrForAnUnknownId) {
  DeadlineTimer timer;
  EXPECT_FALSE(timer.Cancel(0));
  EXPECT_FALSE(timer.Cancel(12345));

  Gate gate;
  const uint64_t running = timer.Schedule(absl::InfinitePast(), gate.Callback());
  gate.WaitEntered();
  EXPECT_FALSE(timer.Cancel(running));  // started
  gate.Open();

  Notification done;
  const uint64_t finished = timer.Schedule(absl::InfinitePast(), [&] { done.Notify(); });
  done.WaitForNotification();
  EXPECT_FALSE(timer.Cancel(finished));  // ran
}

TEST(DeadlineTimer, CallbacksMayScheduleAndCancel) {
  DeadlineTimer timer;
  std::atomic<bool> cancelled_ran{false};
  const uint64_t victim =
      timer.Schedule(absl::Now() + absl::Hours(1), [&] { cancelled_ran = true; });
  bool cancel_result = false;
  Notification inner;
  timer.Schedule(absl::InfinitePast(), [&] {
    cancel_result = timer.Cancel(victim);
    timer.Schedule(absl::InfinitePast(), [&] { inner.Notify(); });
  });
  inner.WaitForNotification();
  EXPECT_TRUE(cancel_result);
  EXPECT_FALSE(cancelled_ran);
  EXPECT_EQ(timer.pending(), 0u);
}

TEST(DeadlineTimer, ManyThreadsScheduleAndCancelAtOnce) {
  DeadlineTimer timer;
  constexpr int kThreads = 4;
  constexpr int kEach = 200;
  std::atomic<int> ran{0};
  std::atomic<int> cancelled{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        timer.Schedule(absl::Now(), [&] { ++ran; });
        const uint64_t id = timer.Schedule(absl::Now() + absl::Hours(1), [] {});
        if (timer.Cancel(id)) ++cancelled;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  // Every callback due so far runs before this one, the latest deadline of them all.
  Notification done;
  timer.Schedule(absl::Now(), [&] { done.Notify(); });
  done.WaitForNotification();
  EXPECT_EQ(ran, kThreads * kEach);
  EXPECT_EQ(cancelled, kThreads * kEach);
  EXPECT_EQ(timer.pending(), 0u);
}

TEST(DeadlineTimer, TheDestructorDropsCallbacksNotYetDue) {
  auto ran = std::make_shared<std::atomic<bool>>(false);
  {
    DeadlineTimer timer;
    timer.Schedule(absl::Now() + absl::Hours(1), [ran] { *ran = true; });
    timer.Schedule(absl::InfiniteFuture(), [ran] { *ran = true; });
    EXPECT_EQ(timer.pending(), 2u);
  }
  EXPECT_FALSE(*ran);
}

TEST(DeadlineTimer, TheDestructorWaitsForARunningCallback) {
  auto timer = std::make_unique<DeadlineTimer>();
  Gate gate;
  std::atomic<bool> finished{false};
  timer->Schedule(absl::InfinitePast(), [&] {
    gate.Callback()();
    finished = true;
  });
  gate.WaitEntered();
  std::thread destroy([&] { timer.reset(); });
  gate.Open();
  destroy.join();
  EXPECT_TRUE(finished);
}

}  // namespace
}  // namespace tensorbroker::daemon
