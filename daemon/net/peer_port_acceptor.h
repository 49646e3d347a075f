// The peer port (--peer-listen): a TCP socket of the daemon's own, accepted on an AcceptThread
// and handed to the peers' gRPC server through its external connection acceptor, where gRPC's
// mutual TLS runs on it. Accepting here is how the port's connections are counted and bounded:
// gRPC 1.51 has no cap on incoming connections, and a host without a certificate holds a
// descriptor from each connect until its handshake fails or times out (--handshake-timeout).
// At most --max-connections are open at once, kMaxConnectionsPerHost from one remote address,
// and only while the daemon has descriptors to spare; others are closed at once (logged).
// Stop() (or the destructor) closes the listening socket; connections handed over are gRPC's.
#ifndef TENSORBROKER_DAEMON_PEER_PORT_ACCEPTOR_H_
#define TENSORBROKER_DAEMON_PEER_PORT_ACCEPTOR_H_

#include <cstdint>
#include <memory>
#include <string>

#include <grpcpp/server_builder.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/mutex.h"
#include "common/unique_fd.h"
#include "daemon/base/open_sockets.h"
#include "daemon/net/accept_thread.h"
#include "daemon/net/connection_limits.h"
#include "daemon/net/listen_address.h"

namespace tensorbroker::daemon {

class PeerPortAcceptor {
 public:
  // Listens on `where` (`text` as the user wrote it, for errors): UNAVAILABLE
  // "--peer-listen: cannot listen on TEXT: WHY" when the port is taken.
  static absl::StatusOr<std::unique_ptr<PeerPortAcceptor>> Listen(const ListenAddress& where,
                                                                  absl::string_view text);
  ~PeerPortAcceptor();
  PeerPortAcceptor(const PeerPortAcceptor&) = delete;
  PeerPortAcceptor& operator=(const PeerPortAcceptor&) = delete;

  // The port bound (the one asked for, or the kernel's choice for 0).
  uint16_t port() const { return port_; }
  // Starts accepting, handing each admitted connection to `grpc_side` (its server started,
  // outliving this acceptor's thread). At most `max_connections` open at once. INTERNAL if no
  // thread could start; FAILED_PRECONDITION after Stop().
  absl::Status Start(std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> grpc_side,
                     size_t max_connections);
  // Stops accepting and closes the listening socket. Idempotent; from any thread.
  void Stop();

 private:
  PeerPortAcceptor(UniqueFd listener, uint16_t port)
      : listener_(std::move(listener)), listener_fd_(listener_.get()), port_(port) {}
  // On the accept thread: admits `connection` and hands it to gRPC, or closes it.
  void Accept(UniqueFd connection);

  Mutex mu_;           // Stop may come from another thread (a takeover)
  UniqueFd listener_;  // until Start hands it to the thread
  const int listener_fd_;
  const uint16_t port_;
  // Set by Start before the thread starts; read by it.
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> grpc_side_;
  std::unique_ptr<ConnectionLimit> limit_;
  OpenSockets open_;
  std::unique_ptr<AcceptThread> thread_;  // last: stopped (joined) before the rest goes
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_PEER_PORT_ACCEPTOR_H_
