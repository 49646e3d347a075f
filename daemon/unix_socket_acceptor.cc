#include "daemon/unix_socket_acceptor.h"

#include <grpcpp/server_posix.h>
#include <poll.h>
#include <sys/eventfd.h>
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
  UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
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
  UniqueFd wake(::eventfd(0, EFD_CLOEXEC));
  if (!wake.valid()) {
    ::unlink(socket_path.c_str());
    return CannotListen(socket_path, absl::StrCat("eventfd: ", std::strerror(errno)));
  }
  return std::unique_ptr<UnixSocketAcceptor>(
      new UnixSocketAcceptor(std::move(listener), std::move(wake)));
}

UnixSocketAcceptor::UnixSocketAcceptor(UniqueFd listener, UniqueFd wake)
    : listener_(std::move(listener)), wake_(std::move(wake)) {}

UnixSocketAcceptor::~UnixSocketAcceptor() { Stop(); }

void UnixSocketAcceptor::Start(grpc::Server* server, PeerRegistry* peers) {
  thread_ = std::thread([this, server, peers] { AcceptLoop(server, peers); });
}

void UnixSocketAcceptor::Stop() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    while (::write(wake_.get(), &one, sizeof(one)) < 0 && errno == EINTR) {
    }
    thread_.join();
  }
  listener_.reset();
}

void UnixSocketAcceptor::AcceptLoop(grpc::Server* server, PeerRegistry* peers) {
  for (;;) {
    pollfd fds[2] = {{listener_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      Log(LogLevel::kError, "accept: poll: ", std::strerror(errno), "; no new clients");
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    UniqueFd connection(
        ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!connection.valid()) {
      if (errno == EMFILE || errno == ENFILE) {
        Log(LogLevel::kWarning, "accept: ", std::strerror(errno), "; retrying in 100 ms");
        ::poll(nullptr, 0, 100);  // out of descriptors: let some close first
      }
      continue;
    }
    ucred credentials{};
    socklen_t size = sizeof(credentials);
    if (::getsockopt(connection.get(), SOL_SOCKET, SO_PEERCRED, &credentials, &size) != 0) {
      Log(LogLevel::kWarning, "accept: SO_PEERCRED: ", std::strerror(errno),
          "; connection refused");
      continue;
    }
    peers->Register(connection.get(), {credentials.pid, credentials.uid, credentials.gid});
    grpc::AddInsecureChannelFromFd(server, connection.release());  // gRPC owns it now
  }
}

}  // namespace tensorbroker::daemon
