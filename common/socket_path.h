// Where the broker's Unix socket lives when nobody says: one rule for the daemon, the client
// library and the CLI, so they always meet. Thread-safe (reads the environment only).
#ifndef TENSORBROKER_COMMON_SOCKET_PATH_H_
#define TENSORBROKER_COMMON_SOCKET_PATH_H_

#include <string>

namespace tensorbroker {

// $TENSORBROKER_SOCKET, else /run/tensorbroker/broker.sock for root, else
// $XDG_RUNTIME_DIR/tensorbroker/broker.sock, else /tmp/tensorbroker-$UID/broker.sock.
std::string ResolveDefaultSocketPath();

}  // namespace tensorbroker

#endif  // TENSORBROKER_COMMON_SOCKET_PATH_H_
