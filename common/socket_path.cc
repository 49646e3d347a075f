#include "common/socket_path.h"

#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace tensorbroker {

std::string ResolveDefaultSocketPath() {
  if (const char* env = std::getenv("TENSORBROKER_SOCKET"); env != nullptr && *env != '\0') {
    return env;
  }
  const uid_t uid = getuid();
  if (uid == 0) return "/run/tensorbroker/broker.sock";
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg != nullptr && *xdg != '\0') {
    return absl::StrCat(xdg, "/tensorbroker/broker.sock");
  }
  return absl::StrCat("/tmp/tensorbroker-", uid, "/broker.sock");
}

std::string LocalChannelPath(const std::string& socket_path) { return socket_path + ".fd"; }

}  // namespace tensorbroker
