#include "daemon/net/connection_limits.h"

#include <utility>

#include "absl/time/clock.h"
#include "common/mutex.h"
#include "daemon/base/descriptor_reserve.h"
#include "daemon/base/log.h"

namespace tensorbroker::daemon {

ConnectionLimit::ConnectionLimit(std::string what, size_t max_connections, uid_t own_uid)
    : what_(std::move(what)), max_(max_connections), own_uid_(own_uid) {}

bool ConnectionLimit::Admit(uid_t uid, size_t open) {
  const bool own = uid == own_uid_;
  const size_t limit = own ? max_ + kReservedConnections : max_;
  // Another user's connection also needs descriptors to spare (descriptor_reserve.h).
  const bool too_many = open >= limit;
  if (!too_many && (own || DescriptorsToSpare())) return true;
  MutexLock lock(mu_);
  ++refused_since_log_;
  const absl::Time now = absl::Now();
  if (now - last_logged_ >= absl::Seconds(10)) {
    Log(LogLevel::kWarning, what_, ": ", open, " connections open (--max-connections ", max_,
        too_many ? "" : "; no descriptors to spare beyond those kept for the daemon's own uid",
        "): refused ", refused_since_log_, " connection(s), the last of uid ", uid);
    last_logged_ = now;
    refused_since_log_ = 0;
  }
  return false;
}

}  // namespace tensorbroker::daemon
