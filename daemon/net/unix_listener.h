// The daemon's listening Unix sockets, made the way every daemon socket is. Either bound here:
// a socket file already there is replaced when nothing listens on it (the caller holds the
// instance lock, so no tensorbrokerd does; one that something listens on is a socket unit's, or
// a stranger's, and is refused with its holder named: socket_holder.h), anything else there is
// refused, and mode 0660 is set before anyone can connect (owner and group; the service's group
// under systemd). Or handed over by the service manager (socket activation,
// tensorbrokerd.socket): then the socket unit made the file, with its modes and group, and the
// socket stays open there between instances, so that a client connecting during a restart
// waits in its backlog. Either way close-on-exec and non-blocking.
#ifndef TENSORBROKER_DAEMON_UNIX_LISTENER_H_
#define TENSORBROKER_DAEMON_UNIX_LISTENER_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/unique_fd.h"
#include "daemon/base/listen_fds.h"

namespace tensorbroker::daemon {

// `type`: SOCK_STREAM or SOCK_SEQPACKET. UNAVAILABLE (or INVALID_ARGUMENT for a path too long)
// naming `flag` when it cannot.
absl::StatusOr<UniqueFd> BindUnixListener(const std::string& path, int type,
                                          absl::string_view flag);

struct UnixListener {
  UniqueFd fd;
  // Handed over: its file belongs to the socket unit, and the daemon never removes it.
  bool inherited = false;
  // The socket file this daemon bound (or took over), so that it removes that file only: one
  // bound at the same path since (systemd starting tensorbrokerd.socket) is someone else's.
  struct FileIdentity {
    dev_t device;
    ino_t inode;
  };
  std::optional<FileIdentity> file_identity;

  // The file at `path` is this daemon's now (bound here, or handed over by --takeover).
  void ClaimFile(const std::string& path);
  // Unlinks `path` when it is still the file claimed; nothing for an inherited listener.
  void RemoveFileIfOurs(const std::string& path) const;
};

// The descriptor in `handed` that is a listening AF_UNIX socket of `type` bound to `path`
// (what the kernel says, whatever its name), taken out of `handed`; otherwise one bound here.
absl::StatusOr<UnixListener> TakeOrBindUnixListener(std::vector<NamedFd>* handed,
                                                    const std::string& path, int type,
                                                    absl::string_view flag);

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_UNIX_LISTENER_H_
