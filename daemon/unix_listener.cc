#include "daemon/unix_listener.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tensorbroker::daemon {

absl::StatusOr<UniqueFd> BindUnixListener(const std::string& path, int type,
                                          absl::string_view flag) {
  auto cannot = [&](absl::string_view why) {
    return absl::UnavailableError(absl::StrCat(flag, ": cannot listen on ", path, ": ", why));
  };
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": '", path, "' is longer than ",
                                                   sizeof(address.sun_path) - 1, " bytes"));
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  // What a dead predecessor left is replaced; anything that is not a socket is not ours.
  struct stat existing {};
  if (::lstat(path.c_str(), &existing) == 0) {
    if (!S_ISSOCK(existing.st_mode)) return cannot("it exists and is not a socket");
    ::unlink(path.c_str());
  }
  UniqueFd listener(::socket(AF_UNIX, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!listener.valid()) return cannot(std::strerror(errno));
  if (::bind(listener.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    return cannot(std::strerror(errno));
  }
  if (::chmod(path.c_str(), 0660) != 0 || ::listen(listener.get(), SOMAXCONN) != 0) {
    const int error = errno;
    ::unlink(path.c_str());
    return cannot(std::strerror(error));
  }
  return listener;
}

}  // namespace tensorbroker::daemon
