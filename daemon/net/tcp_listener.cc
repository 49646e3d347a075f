#include "daemon/net/tcp_listener.h"

#include <netdb.h>
#include <netinet/in.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tensorbroker::daemon {
namespace {

// getnameinfo's numeric host and port; false when it cannot write them.
bool NumericHostAndPort(const sockaddr_storage& address, socklen_t size, std::string* host,
                        std::string* port) {
  char host_text[NI_MAXHOST];
  char port_text[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&address), size, host_text, sizeof(host_text),
                    port_text, sizeof(port_text), NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return false;
  }
  *host = host_text;
  *port = port_text;
  return true;
}

// One attempt on numeric `host`: the socket, or the errno that stopped it.
absl::StatusOr<UniqueFd> ListenOn(const std::string& host, uint16_t port, bool every_interface,
                                  int backlog, int* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = absl::StrCat(port);
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    *error = EADDRNOTAVAIL;
    return absl::UnavailableError(::gai_strerror(rc));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owned(found, &::freeaddrinfo);
  UniqueFd fd(::socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                       found->ai_protocol));
  *error = fd.valid() ? 0 : errno;
  if (*error == 0) {
    const int on = 1;
    const int off = 0;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    if (found->ai_family == AF_INET6 && every_interface) {
      ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
    }
    if (::bind(fd.get(), found->ai_addr, found->ai_addrlen) != 0 ||
        ::listen(fd.get(), backlog) != 0) {
      *error = errno;
    }
  }
  if (*error != 0) return absl::UnavailableError(std::strerror(*error));
  return fd;
}

}  // namespace

absl::StatusOr<UniqueFd> ListenTcp(const ListenAddress& where, absl::string_view field,
                                   absl::string_view text, int backlog) {
  // Every interface: "::", accepting IPv4 too, where the kernel has IPv6; else "0.0.0.0".
  const bool every_interface = where.host.empty();
  const std::vector<std::string> hosts = every_interface ? std::vector<std::string>{"::", "0.0.0.0"}
                                                         : std::vector<std::string>{where.host};
  for (size_t i = 0; i < hosts.size(); ++i) {
    int error = 0;
    auto fd = ListenOn(hosts[i], where.port, every_interface, backlog, &error);
    if (fd.ok()) return fd;
    // Only a kernel without IPv6 moves on from "::" to "0.0.0.0"; a port in use is fatal.
    const bool no_ipv6 = error == EAFNOSUPPORT || error == EADDRNOTAVAIL;
    if (i + 1 == hosts.size() || !no_ipv6) {
      return absl::UnavailableError(
          absl::StrCat(field, ": cannot listen on ", text, ": ", fd.status().message()));
    }
  }
  return absl::UnavailableError(absl::StrCat(field, ": cannot listen on ", text, ": no address"));
}

std::string FormatSocketAddress(const sockaddr_storage& address, socklen_t size) {
  std::string host;
  std::string port;
  if (!NumericHostAndPort(address, size, &host, &port)) return "?";
  return address.ss_family == AF_INET6 ? absl::StrCat("[", host, "]:", port)
                                       : absl::StrCat(host, ":", port);
}

std::string FormatSocketHost(const sockaddr_storage& address, socklen_t size) {
  std::string host;
  std::string port;
  if (!NumericHostAndPort(address, size, &host, &port)) return "?";
  return host;
}

std::string LocalAddressOf(int fd) {
  sockaddr_storage bound{};
  socklen_t size = sizeof(bound);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &size) != 0) return "?";
  return FormatSocketAddress(bound, size);
}

}  // namespace tensorbroker::daemon
