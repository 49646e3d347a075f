#include "daemon/store/watch_hub.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/mutex.h"

namespace tensorbroker::daemon {

WatchHub::WatchHub(size_t log_capacity) : capacity_(std::max<size_t>(log_capacity, 1)) {}

void WatchHub::Forget(uint64_t through, Wakes* wakes) {
  MutexLock lock(mu_);
  ForgetLocked(through);
  if (shut_down_) return;
  // A parked watcher now behind the horizon has a kLost to take.
  for (auto it = parked_.begin(); it != parked_.end();) {
    Watcher& watcher = watchers_.at(*it);
    if (watcher.cursor < forgotten_) {
      watcher.parked = false;
      wakes->push_back(watcher.wake);
      it = parked_.erase(it);
    } else {
      ++it;
    }
  }
}

void WatchHub::ForgetLocked(uint64_t through) {
  forgotten_ = std::max(forgotten_, through);
  while (!log_.empty() && log_.front().event.sequence <= forgotten_) log_.pop_front();
}

bool WatchHub::Append(WatchEntry entry, Wakes* wakes) {
  MutexLock lock(mu_);
  const uint64_t sequence = entry.event.sequence;
  if (sequence <= last_sequence_ || sequence <= forgotten_ ||
      entry.event.kind == StoreEvent::Kind::kLost) {
    return false;
  }
  last_sequence_ = sequence;
  // Evicting the oldest entry puts the horizon at its sequence: a watcher whose cursor is
  // below it gets a kLost. Parked watchers never are (their cursor is at the log's end).
  if (log_.size() >= capacity_) ForgetLocked(log_.front().event.sequence);
  log_.push_back(std::move(entry));
  if (shut_down_) return true;
  const WatchEntry& added = log_.back();
  for (auto it = parked_.begin(); it != parked_.end();) {
    Watcher& watcher = watchers_.at(*it);
    Offer(watcher, added, wakes);
    it = watcher.parked ? std::next(it) : parked_.erase(it);
  }
  return true;
}

void WatchHub::Offer(Watcher& watcher, const WatchEntry& entry, Wakes* wakes) {
  const uint64_t sequence = entry.event.sequence;
  if (sequence > watcher.cursor && Visible(watcher, entry)) {
    watcher.parked = false;
    wakes->push_back(watcher.wake);
  } else {
    watcher.cursor = std::max(watcher.cursor, sequence);
  }
}

bool WatchHub::Visible(const Watcher& watcher, const WatchEntry& entry) {
  if (!absl::StartsWith(entry.event.name, watcher.prefix)) return false;
  const Principal& principal = watcher.principal;
  return principal.admin || entry.publisher_uid == principal.uid || entry.readers.Allows(principal);
}

uint64_t WatchHub::Add(const Principal& principal, std::string prefix,
                       std::optional<uint64_t> after_version, uint64_t now_sequence,
                       std::function<void()> wake) {
  MutexLock lock(mu_);
  const uint64_t now = std::max({now_sequence, last_sequence_, forgotten_});
  uint64_t cursor = now;
  if (after_version.has_value()) cursor = *after_version <= now ? *after_version : 0;
  const uint64_t id = next_id_++;
  watchers_.emplace(id, Watcher{principal, std::move(prefix), cursor, false, std::move(wake)});
  return id;
}

std::deque<WatchEntry>::const_iterator WatchHub::After(uint64_t sequence) const {
  return std::upper_bound(
      log_.begin(), log_.end(), sequence,
      [](uint64_t value, const WatchEntry& entry) { return value < entry.event.sequence; });
}

absl::StatusOr<std::vector<StoreEvent>> WatchHub::Take(uint64_t watcher_id, size_t max) {
  MutexLock lock(mu_);
  if (shut_down_) return absl::UnavailableError("the daemon is shutting down");
  auto found = watchers_.find(watcher_id);
  if (found == watchers_.end()) {
    return absl::NotFoundError(absl::StrCat("watcher ", watcher_id, " is not watching"));
  }
  std::vector<StoreEvent> events;
  if (max == 0) return events;
  Watcher& watcher = found->second;
  if (watcher.cursor < forgotten_) {
    StoreEvent lost;
    lost.kind = StoreEvent::Kind::kLost;
    lost.sequence = forgotten_;
    lost.lost_first = watcher.cursor + 1;
    lost.lost_last = forgotten_;
    events.push_back(std::move(lost));
    watcher.cursor = forgotten_;
  }
  auto it = After(watcher.cursor);
  for (; it != log_.end() && events.size() < max; ++it) {
    watcher.cursor = it->event.sequence;
    if (Visible(watcher, *it)) events.push_back(it->event);
  }
  watcher.parked = it == log_.end();
  if (watcher.parked) {
    parked_.insert(watcher_id);
  } else {
    parked_.erase(watcher_id);
  }
  return events;
}

void WatchHub::Remove(uint64_t watcher_id) {
  MutexLock lock(mu_);
  watchers_.erase(watcher_id);
  parked_.erase(watcher_id);
}

void WatchHub::Shutdown(Wakes* wakes) {
  MutexLock lock(mu_);
  if (shut_down_) return;
  shut_down_ = true;
  for (auto& [id, watcher] : watchers_) {
    watcher.parked = false;
    wakes->push_back(watcher.wake);
  }
  parked_.clear();
}

size_t WatchHub::watchers() const {
  MutexLock lock(mu_);
  return watchers_.size();
}

uint64_t WatchHub::last_sequence() const {
  MutexLock lock(mu_);
  return last_sequence_;
}

uint64_t WatchHub::forgotten_through() const {
  MutexLock lock(mu_);
  return forgotten_;
}

size_t WatchHub::log_size() const {
  MutexLock lock(mu_);
  return log_.size();
}

}  // namespace tensorbroker::daemon
