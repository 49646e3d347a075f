#include "daemon/net/unix_socket_acceptor.h"

#include <grpcpp/server_posix.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "daemon/base/log.h"

namespace tensorbroker::daemon {
UnixSocketAcceptor::~UnixSocketAcceptor() { Stop(); }

absl::Status UnixSocketAcceptor::Start(grpc::Server* server, PeerRegistry* peers,
                                       ConnectionLimit* limit) {
  MutexLock lock(mu_);
  if (!listener_.valid())
    return absl::FailedPreconditionError("--socket: stopped before it started");
  auto thread = AcceptThread::Start(
      std::move(listener_), SOCK_NONBLOCK, "socket", [server, peers, limit](UniqueFd connection) {
        std::optional<PeerCredentials> peer = PeerCredentialsOf(connection.get(), "socket");
        if (!peer.has_value()) return;
        // The registry also holds connections gRPC has closed since: count only when it might
        // matter.
        size_t open = peers->Size();
        if (open >= limit->max_connections()) open = peers->CountOpen();
        if (!limit->Admit(peer->uid, open)) return;  // closed here
        peers->Register(connection.get(), *peer);
        grpc::AddInsecureChannelFromFd(server, connection.release());  // gRPC owns it now
      });
  if (!thread.ok()) return thread.status();
  thread_ = *std::move(thread);
  return absl::OkStatus();
}

void UnixSocketAcceptor::Stop() {
  MutexLock lock(mu_);
  if (thread_ != nullptr) thread_->Stop();
  listener_.reset();
}

}  // namespace tensorbroker::daemon
