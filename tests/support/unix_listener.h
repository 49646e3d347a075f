// A listening Unix socket bound at a path, as a test's stand-in for another process's socket (a
// socket unit's, a squatter's): non-blocking, close-on-exec, backlog 4. An invalid UniqueFd when
// it cannot be made (the path taken, too long).
#ifndef TENSORBROKER_TESTS_SUPPORT_UNIX_LISTENER_H_
#define TENSORBROKER_TESTS_SUPPORT_UNIX_LISTENER_H_

#include <sys/socket.h>
#include <sys/un.h>

#include <cstring>
#include <string>

#include "common/unique_fd.h"

namespace tensorbroker::testing {

inline UniqueFd ListenOnUnixSocket(const std::string& path, int type = SOCK_STREAM) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof(address.sun_path)) return UniqueFd();
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid() ||
      ::bind(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0 ||
      ::listen(fd.get(), 4) != 0) {
    return UniqueFd();
  }
  return fd;
}

}  // namespace tensorbroker::testing

#endif  // TENSORBROKER_TESTS_SUPPORT_UNIX_LISTENER_H_
