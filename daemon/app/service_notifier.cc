#include "daemon/app/service_notifier.h"

#include <systemd/sd-daemon.h>

#include <cstdint>

#include "absl/strings/str_cat.h"

namespace tensorbroker::daemon {
namespace {

void Notify(const std::string& state) { (void)sd_notify(/*unset_environment=*/0, state.c_str()); }

// STATUS= is one line: newlines would start another assignment.
std::string OneLine(absl::string_view text) {
  std::string line(text);
  for (char& c : line) {
    if (c == '\n') c = ' ';
  }
  return line;
}

}  // namespace

void NotifyReady(absl::string_view status) {
  Notify(absl::StrCat("READY=1\nSTATUS=", OneLine(status)));
}

void NotifyStatus(absl::string_view status) { Notify(absl::StrCat("STATUS=", OneLine(status))); }

void NotifyStopping() { Notify("STOPPING=1\nSTATUS=stopping"); }

void NotifyWatchdog() { Notify("WATCHDOG=1"); }

std::optional<absl::Duration> WatchdogTimeout() {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(/*unset_environment=*/0, &usec) <= 0 || usec == 0) return std::nullopt;
  return absl::Microseconds(static_cast<int64_t>(usec));
}

}  // namespace tensorbroker::daemon
