// Binds and listens on a Unix socket the way every daemon socket is: a socket file already
// there is replaced (the caller holds the instance lock), anything else there is refused, and
// mode 0660 is set before anyone can connect (owner and group; the service's group under
// systemd). Close-on-exec and non-blocking. UNAVAILABLE naming `flag` when it cannot.
#ifndef TENSORBROKER_DAEMON_UNIX_LISTENER_H_
#define TENSORBROKER_DAEMON_UNIX_LISTENER_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/unique_fd.h"

namespace tensorbroker::daemon {

// `type`: SOCK_STREAM or SOCK_SEQPACKET.
absl::StatusOr<UniqueFd> BindUnixListener(const std::string& path, int type,
                                          absl::string_view flag);

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_UNIX_LISTENER_H_
