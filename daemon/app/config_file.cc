#include "daemon/app/config_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tensorbroker::daemon {

absl::StatusOr<std::vector<Setting>> ParseConfigText(absl::string_view text,
                                                     const std::string& path) {
  std::vector<Setting> settings;
  std::set<std::string> seen;
  int number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    const std::string origin = absl::StrCat(path, ":", number);
    if (size_t hash = line.find('#'); hash != absl::string_view::npos) line = line.substr(0, hash);
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(origin, ": expected 'key = value', got '", line.substr(0, 64), "'"));
    }
    Setting setting{std::string(absl::StripAsciiWhitespace(line.substr(0, eq))),
                    std::string(absl::StripAsciiWhitespace(line.substr(eq + 1))), origin};
    if (setting.key.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(origin, ": no key before '='"));
    }
    if (!seen.insert(setting.key).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(origin, ": '", setting.key, "' is set twice in this file"));
    }
    settings.push_back(std::move(setting));
  }
  return settings;
}

absl::StatusOr<std::vector<Setting>> ReadConfigFile(const std::string& path) {
  std::ifstream file(path);
  if (!file) {
    const int error = errno;
    const std::string message = absl::StrCat("config file ", path, ": ", std::strerror(error));
    if (error == ENOENT) return absl::NotFoundError(message);
    return absl::InvalidArgumentError(message);
  }
  std::stringstream text;
  text << file.rdbuf();
  return ParseConfigText(text.str(), path);
}

}  // namespace tensorbroker::daemon
