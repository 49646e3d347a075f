// Mutex and MutexLock: std::mutex with the capability annotations that clang's -Wthread-safety
// reads, so that ABSL_GUARDED_BY / ABSL_EXCLUSIVE_LOCKS_REQUIRED contracts are checked at
// compile time (the clang build of the fuzz stage makes a broken one an error). Not
// absl::Mutex: Debian's Abseil is not built for ThreadSanitizer, which sees the happens-before
// edges of pthread-based locks only. CondVar waits on a MutexLock (std::condition_variable_any
// takes any lock with lock() and unlock()).
//
//   Mutex mu_;
//   int count_ ABSL_GUARDED_BY(mu_) = 0;
//   void Add() { MutexLock lock(mu_); ++count_; }
#ifndef TENSORBROKER_COMMON_MUTEX_H_
#define TENSORBROKER_COMMON_MUTEX_H_

#include <condition_variable>
#include <mutex>

#include "absl/base/thread_annotations.h"

namespace tensorbroker {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

// Holds `mu` from construction to destruction, except between an unlock() and the next lock()
// (a wait, or a callback run without the lock).
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() {
    if (held_) mu_.unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void unlock() ABSL_UNLOCK_FUNCTION() {
    mu_.unlock();
    held_ = false;
  }
  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    mu_.lock();
    held_ = true;
  }

 private:
  Mutex& mu_;
  bool held_ = true;
};

using CondVar = std::condition_variable_any;

}  // namespace tensorbroker

#endif  // TENSORBROKER_COMMON_MUTEX_H_
