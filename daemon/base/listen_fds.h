// The descriptors the service manager passed at start: sockets of a socket unit and whatever
// the previous instance kept in the descriptor store (fd_store.h), by systemd's protocol
// (sd_listen_fds_with_names(3): $LISTEN_PID must be this process, $LISTEN_FDS counts the
// descriptors from 3 on, $LISTEN_FDNAMES names them). Nothing else is trusted to carry them.
#ifndef TENSORBROKER_DAEMON_LISTEN_FDS_H_
#define TENSORBROKER_DAEMON_LISTEN_FDS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/unique_fd.h"

namespace tensorbroker::daemon {

struct NamedFd {
  std::string name;  // "unknown" where the service manager gave none
  UniqueFd fd;
};

// Takes them once: the variables are unset (so that no child inherits them) and each descriptor
// is made close-on-exec and owned by the result. Empty when none were passed (run by hand).
// INTERNAL when the variables are malformed.
absl::StatusOr<std::vector<NamedFd>> TakeListenFds();

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_LISTEN_FDS_H_
