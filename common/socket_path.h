// Where the broker's Unix socket lives when nobody says: one rule for the daemon, the client
// library and the CLI, so they always meet. Thread-safe (reads the environment only).
#ifndef TENSORBROKER_COMMON_SOCKET_PATH_H_
#define TENSORBROKER_COMMON_SOCKET_PATH_H_

#include <sys/types.h>

#include <optional>
#include <string>

namespace tensorbroker {

// $TENSORBROKER_SOCKET, else /run/tensorbroker/broker.sock for root, else
// $XDG_RUNTIME_DIR/tensorbroker/broker.sock, else /tmp/tensorbroker-$UID/broker.sock.
std::string ResolveDefaultSocketPath();

// The per-user fallback directory of `uid`: /tmp/tensorbroker-<uid>. In /tmp anyone may create
// it first, so it counts only when it is that user's own, mode 0700 (socket_directory.h).
std::string PerUserSocketDirectory(uid_t uid);
// The uid whose per-user fallback directory `directory` is ("/tmp/tensorbroker-1000": 1000),
// or nothing when it is not one. `directory` is compared as given (absolute, normalized).
std::optional<uid_t> PerUserSocketDirectoryOwner(const std::string& directory);

// The local channel's socket (descriptors and the hot calls) beside the gRPC socket at
// `socket_path`: "<socket_path>.fd", in the same directory so one mount serves both.
std::string LocalChannelPath(const std::string& socket_path);

}  // namespace tensorbroker

#endif  // TENSORBROKER_COMMON_SOCKET_PATH_H_
