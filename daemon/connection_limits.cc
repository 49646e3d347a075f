#include "daemon/connection_limits.h"

#include <utility>

#include "absl/time/clock.h"
#include "daemon/log.h"

namespace tensorbroker::daemon {

ConnectionLimit::ConnectionLimit(std::string what, size_t max_connections, uid_t own_uid)
    : what_(std::move(what)), max_(max_connections), own_uid_(own_uid) {}

bool ConnectionLimit::Admit(uid_t uid, size_t open) {
  const size_t limit = uid == own_uid_ ? max_ + kReservedConnections : max_;
  if (open < limit) return true;
  std::lock_guard<std::mutex> lock(mu_);
  ++refused_since_log_;
  const absl::Time now = absl::Now();
  if (now - last_logged_ >= absl::Seconds(10)) {
    Log(LogLevel::kWarning, what_, ": ", open, " connections open (--max-connections ", max_,
        "): refused ", refused_since_log_, " connection(s), the last of uid ", uid);
    last_logged_ = now;
    refused_since_log_ = 0;
  }
  return false;
}

}  // namespace tensorbroker::daemon
