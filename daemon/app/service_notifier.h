// Tells the service manager how the daemon is doing, through sd_notify(3) and $NOTIFY_SOCKET:
// READY=1 once the socket serves, STATUS= lines, STOPPING=1 on shutdown, WATCHDOG=1 pings.
// Without $NOTIFY_SOCKET (not started by systemd) every call does nothing.
// Thread-safe (sd_notify is).
#ifndef TENSORBROKER_DAEMON_SERVICE_NOTIFIER_H_
#define TENSORBROKER_DAEMON_SERVICE_NOTIFIER_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace tensorbroker::daemon {

void NotifyReady(absl::string_view status);
void NotifyStatus(absl::string_view status);
void NotifyStopping();
void NotifyWatchdog();
// The watchdog timeout the service manager set (WatchdogSec= via $WATCHDOG_USEC, for this
// process), or nullopt when there is none.
std::optional<absl::Duration> WatchdogTimeout();

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_SERVICE_NOTIFIER_H_
