#include "daemon/net/peer_port_acceptor.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <utility>

#include "common/mutex.h"
#include "daemon/net/tcp_listener.h"

namespace tensorbroker::daemon {
namespace {

// A burst of peers' connects waits in the kernel's queue rather than in their SYN retries.
constexpr int kBacklog = 256;

// The remote host of connection `fd` ("10.0.0.3", "::1"); "?" when the kernel cannot say.
std::string RemoteHostOf(int fd) {
  sockaddr_storage address{};
  socklen_t size = sizeof(address);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &size) != 0) return "?";
  return FormatSocketHost(address, size);
}

uint16_t BoundPort(int fd) {
  sockaddr_storage bound{};
  socklen_t size = sizeof(bound);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &size) != 0) return 0;
  if (bound.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
}

}  // namespace

absl::StatusOr<std::unique_ptr<PeerPortAcceptor>> PeerPortAcceptor::Listen(
    const ListenAddress& where, absl::string_view text) {
  auto listener = ListenTcp(where, "--peer-listen", text, kBacklog);
  if (!listener.ok()) return listener.status();
  const uint16_t port = BoundPort(listener->get());
  return std::unique_ptr<PeerPortAcceptor>(new PeerPortAcceptor(*std::move(listener), port));
}

PeerPortAcceptor::~PeerPortAcceptor() { Stop(); }

absl::Status PeerPortAcceptor::Start(
    std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> grpc_side,
    size_t max_connections) {
  MutexLock lock(mu_);
  if (!listener_.valid()) {
    return absl::FailedPreconditionError("--peer-listen: stopped before it started");
  }
  grpc_side_ = std::move(grpc_side);
  limit_ = std::make_unique<ConnectionLimit>("peer port", max_connections, ::getuid());
  auto thread = AcceptThread::Start(std::move(listener_), SOCK_NONBLOCK, "peer port",
                                    [this](UniqueFd connection) { Accept(std::move(connection)); });
  if (!thread.ok()) return thread.status();
  thread_ = *std::move(thread);
  return absl::OkStatus();
}

void PeerPortAcceptor::Accept(UniqueFd connection) {
  const std::string host = RemoteHostOf(connection.get());
  // What is recorded bounds what is open; closed connections are forgotten only when it might
  // matter.
  OpenSockets::Counts counts = open_.Recorded(host);
  if (counts.total >= limit_->max_connections() || counts.with_key >= kMaxConnectionsPerHost) {
    counts = open_.CountOpen(host);
  }
  if (!limit_->AdmitFromHost(host, counts.total, counts.with_key)) return;  // closed here
  const int on = 1;
  ::setsockopt(connection.get(), IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
  open_.Add(connection.get(), host);
  grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters handed;
  handed.listener_fd = listener_fd_;
  handed.fd = connection.release();  // gRPC's now: it runs the TLS handshake, then the calls
  grpc_side_->HandleNewConnection(&handed);
}

void PeerPortAcceptor::Stop() {
  MutexLock lock(mu_);
  if (thread_ != nullptr) thread_->Stop();
  listener_.reset();
}

}  // namespace tensorbroker::daemon
