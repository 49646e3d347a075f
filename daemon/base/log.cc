#include "daemon/base/log.h"

#include <unistd.h>

#include <atomic>
#include <string>

namespace tensorbroker::daemon {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
}  // namespace

absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view text, absl::string_view field) {
  if (text == "error") return LogLevel::kError;
  if (text == "warning" || text == "warn") return LogLevel::kWarning;
  if (text == "notice") return LogLevel::kNotice;
  if (text == "info") return LogLevel::kInfo;
  if (text == "debug") return LogLevel::kDebug;
  return absl::InvalidArgumentError(absl::StrCat(
      field, " '", text.substr(0, 32), "' is not one of error, warning, notice, info, debug"));
}

absl::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return "error";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kNotice:
      return "notice";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kDebug:
      return "debug";
  }
  return "info";
}

LogLevel CurrentLogLevel() { return static_cast<LogLevel>(g_level.load()); }

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }

bool LogEnabled(LogLevel level) { return static_cast<int>(level) <= g_level.load(); }

std::string LogSafe(absl::string_view text, size_t max_bytes) {
  const bool cut = text.size() > max_bytes;
  if (cut) text = text.substr(0, max_bytes);
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const unsigned char byte = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (byte < 0x20 || byte >= 0x7f) {
      absl::StrAppend(&out, "\\x", absl::Hex(byte, absl::kZeroPad2));
    } else {
      out += c;
    }
  }
  if (cut) out += "...";
  return out;
}

void LogLine(LogLevel level, absl::string_view message) {
  // One write(2) per line keeps lines from different threads whole.
  std::string line = absl::StrCat("<", static_cast<int>(level), ">", message, "\n");
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    const ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n <= 0) return;
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace tensorbroker::daemon
