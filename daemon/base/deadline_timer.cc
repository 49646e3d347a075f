#include "daemon/base/deadline_timer.h"

#include "common/mutex.h"

namespace tensorbroker::daemon {

DeadlineTimer::DeadlineTimer() : thread_([this] { Run(); }) {}

DeadlineTimer::~DeadlineTimer() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

uint64_t DeadlineTimer::Schedule(absl::Time deadline, std::function<void()> callback) {
  MutexLock lock(mu_);
  const uint64_t id = next_id_++;
  const bool earliest = entries_.empty() || deadline < entries_.begin()->first.first;
  entries_.emplace(std::make_pair(deadline, id), std::move(callback));
  deadlines_.emplace(id, deadline);
  if (earliest) changed_.notify_all();
  return id;
}

bool DeadlineTimer::Cancel(uint64_t id) {
  MutexLock lock(mu_);
  auto it = deadlines_.find(id);
  if (it == deadlines_.end()) return false;
  entries_.erase(std::make_pair(it->second, id));
  deadlines_.erase(it);
  return true;
}

size_t DeadlineTimer::pending() const {
  MutexLock lock(mu_);
  return entries_.size();
}

void DeadlineTimer::Run() {
  MutexLock lock(mu_);
  while (!stopping_) {
    if (entries_.empty()) {
      changed_.wait(lock);
      continue;
    }
    auto first = entries_.begin();
    const absl::Time due = first->first.first;
    if (absl::Now() < due) {
      changed_.wait_until(lock, absl::ToChronoTime(due));
      continue;
    }
    std::function<void()> callback = std::move(first->second);
    deadlines_.erase(first->first.second);
    entries_.erase(first);
    lock.unlock();
    callback();
    lock.lock();
  }
}

}  // namespace tensorbroker::daemon
