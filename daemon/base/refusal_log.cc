#include "daemon/base/refusal_log.h"

#include <utility>

#include "absl/time/clock.h"
#include "daemon/base/log.h"

namespace tensorbroker::daemon {
namespace {

constexpr absl::string_view kOtherKeys = "(other keys)";

}  // namespace

RefusalLog::RefusalLog(std::string what, absl::Duration interval)
    : what_(std::move(what)), interval_(interval) {}

RefusalLog::Key& RefusalLog::EntryLocked(absl::string_view key, absl::Time now) {
  if (auto it = keys_.find(key); it != keys_.end()) return it->second;
  if (keys_.size() >= kMaxRefusalKeys) {
    // Forget the keys whose last line is older than the interval and that counted nothing
    // since: their next refusal is logged at once anyway.
    for (auto it = keys_.begin(); it != keys_.end();) {
      const bool idle = it->second.since_logged == 0 && now - it->second.last_logged >= interval_;
      it = idle ? keys_.erase(it) : std::next(it);
    }
  }
  if (keys_.size() >= kMaxRefusalKeys) key = kOtherKeys;
  return keys_[std::string(key)];
}

bool RefusalLog::Note(absl::string_view key, absl::string_view why, absl::string_view noun,
                      absl::string_view last) {
  uint64_t count = 0;
  {
    MutexLock lock(mu_);
    const absl::Time now = absl::Now();
    Key& entry = EntryLocked(key, now);
    ++entry.since_logged;
    if (now - entry.last_logged < interval_) return false;
    count = entry.since_logged;
    entry.since_logged = 0;
    entry.last_logged = now;
  }
  Log(LogLevel::kWarning, what_, ": ", why, ": refused ", count, " ", noun, ", the last ", last);
  return true;
}

}  // namespace tensorbroker::daemon
