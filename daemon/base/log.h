// Minimal leveled logging to stderr, one line per event, prefixed with the syslog priority
// (<3> error .. <7> debug) so journald keeps the level. Thread-safe; the level can change at
// run time.
#ifndef TENSORBROKER_DAEMON_LOG_H_
#define TENSORBROKER_DAEMON_LOG_H_

#include <string>

#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace tensorbroker::daemon {

enum class LogLevel { kError = 3, kWarning = 4, kNotice = 5, kInfo = 6, kDebug = 7 };

// `field` names the setting in errors ("--log-level", or "file:line: log-level").
absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view text,
                                       absl::string_view field = "--log-level");
absl::string_view LogLevelName(LogLevel level);
LogLevel CurrentLogLevel();
void SetLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);
void LogLine(LogLevel level, absl::string_view message);
// `text` from a client made fit for one log line: printable ASCII as it is, '"' and '\\'
// escaped, \n, and every other byte (control bytes, bytes >= 0x80) as \xNN, so the line is
// plain ASCII (journald shows lines that are not valid UTF-8 as "[blob data]"); at most
// `max_bytes` of `text`, then "...".
std::string LogSafe(absl::string_view text, size_t max_bytes = 256);

template <typename... Args>
void Log(LogLevel level, const Args&... args) {
  if (LogEnabled(level)) LogLine(level, absl::StrCat(args...));
}

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_LOG_H_
