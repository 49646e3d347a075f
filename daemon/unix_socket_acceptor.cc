#include "daemon/unix_socket_acceptor.h"

#include <grpcpp/server_posix.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "daemon/log.h"

namespace tensorbroker::daemon {
namespace {

absl::Status CannotListen(const std::string& path, absl::string_view why) {
  return absl::UnavailableError(absl::StrCat("--socket: cannot listen on ", path, ": ", why));
}

}  // namespace

absl::StatusOr<std::unique_ptr<UnixSocketAcceptor>> UnixSocketAcceptor::Bind(
    const std::string& socket_path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("--socket: '", socket_path, "' is longer than ",
                                                   sizeof(address.sun_path) - 1, " bytes"));
  }
  std::memcpy(address.sun_path, socket_path.c_str(), socket_path.size() + 1);
  // What a dead predecessor left is replaced; anything that is not a socket is not ours.
  struct stat existing {};
  if (::lstat(socket_path.c_str(), &existing) == 0) {
    if (!S_ISSOCK(existing.st_mode)) return CannotListen(socket_path, "it exists and is not a socket");
    ::unlink(socket_path.c_str());
  }
  UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!listener.valid()) return CannotListen(socket_path, std::strerror(errno));
  if (::bind(listener.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    return CannotListen(socket_path, std::strerror(errno));
  }
  // Owner and group may connect (the service's group under systemd); set before anyone can.
  if (::chmod(socket_path.c_str(), 0660) != 0 || ::listen(listener.get(), SOMAXCONN) != 0) {
    const int error = errno;
    ::unlink(socket_path.c_str());
    return CannotListen(socket_path, std::strerror(error));
  }
  return std::unique_ptr<UnixSocketAcceptor>(new UnixSocketAcceptor(std::move(listener)));
}

UnixSocketAcceptor::~UnixSocketAcceptor() { Stop(); }

absl::Status UnixSocketAcceptor::Start(grpc::Server* server, PeerRegistry* peers) {
  auto thread = AcceptThread::Start(
      std::move(listener_), SOCK_NONBLOCK, "socket", [server, peers](UniqueFd connection) {
        ucred credentials{};
        socklen_t size = sizeof(credentials);
        if (::getsockopt(connection.get(), SOL_SOCKET, SO_PEERCRED, &credentials, &size) != 0) {
          Log(LogLevel::kWarning, "socket: SO_PEERCRED: ", std::strerror(errno),
              "; connection refused");
          return;
        }
        peers->Register(connection.get(), {credentials.pid, credentials.uid, credentials.gid});
        grpc::AddInsecureChannelFromFd(server, connection.release());  // gRPC owns it now
      });
  if (!thread.ok()) return thread.status();
  thread_ = *std::move(thread);
  return absl::OkStatus();
}

void UnixSocketAcceptor::Stop() {
  if (thread_ != nullptr) thread_->Stop();
  listener_.reset();
}

}  // namespace tensorbroker::daemon
