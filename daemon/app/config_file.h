// tensorbrokerd's configuration file: one `key = value` per line, keys named like the flags
// without their dashes (socket, capacity, cuda-capacity, log-level); `#` starts a comment;
// blank lines are ignored. Reading only: what a key means is daemon_options.cc's business.
// Pure functions; thread-safe.
#ifndef TENSORBROKER_DAEMON_CONFIG_FILE_H_
#define TENSORBROKER_DAEMON_CONFIG_FILE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tensorbroker::daemon {

// One setting and where it came from ("--capacity" or "/etc/tensorbroker/x.conf:3"), so an
// error can point at it.
struct Setting {
  std::string key;
  std::string value;
  std::string origin;
};

// NOT_FOUND when `path` does not exist; INVALID_ARGUMENT naming path:line for a line that is
// not `key = value` or a key given twice.
absl::StatusOr<std::vector<Setting>> ReadConfigFile(const std::string& path);
// The same, from text already read (`path` only names it in errors).
absl::StatusOr<std::vector<Setting>> ParseConfigText(absl::string_view text,
                                                     const std::string& path);

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_CONFIG_FILE_H_
