// Where the broker's Unix socket lives when nobody says: one rule for the daemon, the client
// library and the CLI, so they always meet. Thread-safe (reads the environment only).
#ifndef TENSORBROKER_COMMON_SOCKET_PATH_H_
#define TENSORBROKER_COMMON_SOCKET_PATH_H_

#include <string>

namespace tensorbroker {

// $TENSORBROKER_SOCKET, else /run/tensorbroker/broker.sock for root, else
// $XDG_RUNTIME_DIR/tensorbroker/broker.sock, else /tmp/tensorbroker-$UID/broker.sock.
std::string ResolveDefaultSocketPath();

// The local channel's socket (descriptors and the hot calls) beside the gRPC socket at
// `socket_path`: "<socket_path>.fd", in the same directory so one mount serves both.
std::string LocalChannelPath(const std::string& socket_path);

}  // namespace tensorbroker

#endif  // TENSORBROKER_COMMON_SOCKET_PATH_H_
