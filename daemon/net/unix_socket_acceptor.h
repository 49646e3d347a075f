// The daemon's gRPC socket (unix_listener.h makes it): accepts each
// connection itself to record the kernel's peer credentials (PeerRegistry), then hands the
// connection to the gRPC server (grpc::AddInsecureChannelFromFd), which owns it from then on.
// gRPC's own listener cannot tell who connected; this is how every call's log line names the
// client's pid and uid.
// Accepts on an AcceptThread; Stop() (or the destructor) ends it and closes the listening
// socket, so new connections are refused while established ones finish.
#ifndef TENSORBROKER_DAEMON_UNIX_SOCKET_ACCEPTOR_H_
#define TENSORBROKER_DAEMON_UNIX_SOCKET_ACCEPTOR_H_

#include <memory>
#include <string>
#include <utility>

#include <grpcpp/server.h>

#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "common/unique_fd.h"
#include "daemon/identity/peer_registry.h"
#include "daemon/net/accept_thread.h"
#include "daemon/net/connection_limits.h"

namespace tensorbroker::daemon {

class UnixSocketAcceptor {
 public:
  // Will accept on `listener` (listening, non-blocking).
  explicit UnixSocketAcceptor(UniqueFd listener) : listener_(std::move(listener)) {}
  ~UnixSocketAcceptor();
  UnixSocketAcceptor(const UnixSocketAcceptor&) = delete;
  UnixSocketAcceptor& operator=(const UnixSocketAcceptor&) = delete;

  // Starts accepting for `server` (started, outliving this acceptor's thread), recording each
  // client in `peers` (outliving the server's calls). A connection over `limit` (outliving the
  // thread too) is closed at once. INTERNAL if no thread could start.
  absl::Status Start(grpc::Server* server, PeerRegistry* peers, ConnectionLimit* limit);
  // Stops accepting and closes the listening socket; the socket file stays (the caller unlinks
  // it). Idempotent; from any thread. A Start after it fails.
  void Stop();

 private:
  Mutex mu_;           // Stop may come from another thread (a takeover)
  UniqueFd listener_;  // until Start hands it to the thread
  std::unique_ptr<AcceptThread> thread_;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_UNIX_SOCKET_ACCEPTOR_H_
