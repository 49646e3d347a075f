#include "daemon/net/unix_listener.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "common/user_names.h"
#include "daemon/base/log.h"
#include "daemon/net/socket_holder.h"

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
  // What a dead predecessor left is replaced, whoever it was; a socket something still listens
  // on (systemd's socket unit) and anything that is not a socket are not ours.
  struct stat existing {};
  if (::lstat(path.c_str(), &existing) == 0) {
    if (!S_ISSOCK(existing.st_mode)) return cannot("it exists and is not a socket");
    if (absl::Status nobody = CheckNobodyListens(path, flag); !nobody.ok()) return nobody;
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return cannot(absl::StrCat("cannot remove the stale socket file of ",
                                 DescribeUid(existing.st_uid), ": ", std::strerror(errno)));
    }
    Log(LogLevel::kInfo, "removed the socket file ", path, " of ", DescribeUid(existing.st_uid),
        " left behind by a daemon no longer running");
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

namespace tensorbroker::daemon {
namespace {

int SocketOption(int fd, int option) {
  int value = -1;
  socklen_t size = sizeof(value);
  if (::getsockopt(fd, SOL_SOCKET, option, &value, &size) != 0) return -1;
  return value;
}

// Whether `fd` is a listening AF_UNIX socket of `type` bound to `path`.
bool IsListenerFor(int fd, const std::string& path, int type) {
  if (SocketOption(fd, SO_DOMAIN) != AF_UNIX || SocketOption(fd, SO_TYPE) != type ||
      SocketOption(fd, SO_ACCEPTCONN) != 1) {
    return false;
  }
  sockaddr_un address{};
  socklen_t size = sizeof(address);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) != 0) return false;
  const size_t offset = offsetof(sockaddr_un, sun_path);
  if (size <= offset) return false;
  const std::string bound(address.sun_path, strnlen(address.sun_path, size - offset));
  if (bound == path) return true;
  std::error_code error;
  const std::filesystem::path absolute = std::filesystem::absolute(path, error);
  return !error && bound == absolute.lexically_normal().string();
}

}  // namespace

absl::StatusOr<UnixListener> TakeOrBindUnixListener(std::vector<NamedFd>* handed,
                                                    const std::string& path, int type,
                                                    absl::string_view flag) {
  for (auto it = handed->begin(); it != handed->end(); ++it) {
    if (!IsListenerFor(it->fd.get(), path, type)) continue;
    UnixListener listener{std::move(it->fd), true, std::nullopt};
    handed->erase(it);
    const int flags = ::fcntl(listener.fd.get(), F_GETFL);
    if (flags < 0 || ::fcntl(listener.fd.get(), F_SETFL, flags | O_NONBLOCK) != 0 ||
        ::fcntl(listener.fd.get(), F_SETFD, FD_CLOEXEC) != 0) {
      return absl::UnavailableError(
          absl::StrCat(flag, ": the socket handed over for ", path, ": ", std::strerror(errno)));
    }
    return listener;
  }
  auto bound = BindUnixListener(path, type, flag);
  if (!bound.ok()) return bound.status();
  UnixListener listener{*std::move(bound), false, std::nullopt};
  listener.ClaimFile(path);
  return listener;
}

void UnixListener::ClaimFile(const std::string& path) {
  inherited = false;
  struct stat file {};
  if (::lstat(path.c_str(), &file) == 0) file_identity = FileIdentity{file.st_dev, file.st_ino};
}

void UnixListener::RemoveFileIfOurs(const std::string& path) const {
  if (inherited || !file_identity.has_value()) return;
  struct stat file {};
  if (::lstat(path.c_str(), &file) != 0 || file.st_dev != file_identity->device ||
      file.st_ino != file_identity->inode) {
    return;  // bound again since by someone else (a socket unit started meanwhile)
  }
  ::unlink(path.c_str());
}

}  // namespace tensorbroker::daemon
