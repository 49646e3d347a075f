#include "common/socket_path.h"

#include <unistd.h>

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace tensorbroker {
namespace {
constexpr char kPerUserPrefix[] = "/tmp/tensorbroker-";
}  // namespace

std::string ResolveDefaultSocketPath() {
  if (const char* env = std::getenv("TENSORBROKER_SOCKET"); env != nullptr && *env != '\0') {
    return env;
  }
  const uid_t uid = getuid();
  if (uid == 0) return "/run/tensorbroker/broker.sock";
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg != nullptr && *xdg != '\0') {
    return absl::StrCat(xdg, "/tensorbroker/broker.sock");
  }
  return absl::StrCat(PerUserSocketDirectory(uid), "/broker.sock");
}

std::string PerUserSocketDirectory(uid_t uid) { return absl::StrCat(kPerUserPrefix, uid); }

std::optional<uid_t> PerUserSocketDirectoryOwner(const std::string& directory) {
  absl::string_view rest = directory;
  if (!absl::ConsumePrefix(&rest, kPerUserPrefix)) return std::nullopt;
  uint32_t uid = 0;
  // Digits only, as PerUserSocketDirectory writes them ("+1" or " 1" is some other directory).
  if (rest.empty() || rest.find_first_not_of("0123456789") != absl::string_view::npos ||
      !absl::SimpleAtoi(rest, &uid) || absl::StrCat(uid) != rest) {
    return std::nullopt;
  }
  return static_cast<uid_t>(uid);
}

std::string LocalChannelPath(const std::string& socket_path) { return socket_path + ".fd"; }

}  // namespace tensorbroker
