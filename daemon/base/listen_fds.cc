#include "daemon/base/listen_fds.h"

#include <fcntl.h>
#include <systemd/sd-daemon.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tensorbroker::daemon {

absl::StatusOr<std::vector<NamedFd>> TakeListenFds() {
  char** names = nullptr;
  const int count = sd_listen_fds_with_names(/*unset_environment=*/1, &names);
  if (count < 0) {
    return absl::InternalError(
        absl::StrCat("$LISTEN_FDS/$LISTEN_FDNAMES: ", std::strerror(-count)));
  }
  std::vector<NamedFd> taken;
  taken.reserve(count);
  for (int i = 0; i < count; ++i) {
    const int fd = SD_LISTEN_FDS_START + i;
    (void)::fcntl(fd, F_SETFD, FD_CLOEXEC);
    taken.push_back({names != nullptr && names[i] != nullptr ? names[i] : "unknown", UniqueFd(fd)});
  }
  if (names != nullptr) {
    for (int i = 0; i < count; ++i) std::free(names[i]);
    std::free(names);
  }
  return taken;
}

}  // namespace tensorbroker::daemon
