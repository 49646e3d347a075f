#include "daemon/metrics_http_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "daemon/log.h"

namespace tensorbroker::daemon {
namespace {

constexpr size_t kMaxRequestBytes = 8192;
constexpr absl::Duration kConnectionLimit = absl::Seconds(2);  // reading and answering


std::string FormatAddress(const sockaddr_storage& address, socklen_t size) {
  char host[NI_MAXHOST];
  char port[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&address), size, host, sizeof(host), port,
                    sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "?";
  }
  return address.ss_family == AF_INET6 ? absl::StrCat("[", host, "]:", port)
                                       : absl::StrCat(host, ":", port);
}

// A listening TCP socket (non-blocking) on `host` (numeric; empty: every interface) and `port`.
absl::StatusOr<UniqueFd> Listen(const ListenAddress& where, absl::string_view text) {
  auto cannot = [&](absl::string_view why) {
    return absl::UnavailableError(
        absl::StrCat("--metrics-listen: cannot listen on ", text, ": ", why));
  };
  // Every interface: "::", accepting IPv4 too, where the kernel has IPv6; else "0.0.0.0".
  const std::vector<std::string> hosts =
      where.host.empty() ? std::vector<std::string>{"::", "0.0.0.0"}
                         : std::vector<std::string>{where.host};
  const std::string port = absl::StrCat(where.port);
  for (size_t i = 0; i < hosts.size(); ++i) {
    const bool last = i + 1 == hosts.size();
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV;
    addrinfo* found = nullptr;
    if (int rc = ::getaddrinfo(hosts[i].c_str(), port.c_str(), &hints, &found); rc != 0) {
      if (last) return cannot(::gai_strerror(rc));
      continue;
    }
    std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owned(found, &::freeaddrinfo);
    UniqueFd fd(::socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                         found->ai_protocol));
    int error = fd.valid() ? 0 : errno;
    if (error == 0) {
      const int on = 1;
      const int off = 0;
      ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
      if (found->ai_family == AF_INET6 && where.host.empty()) {
        ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
      }
      if (::bind(fd.get(), found->ai_addr, found->ai_addrlen) != 0 ||
          ::listen(fd.get(), 16) != 0) {
        error = errno;
      }
    }
    if (error == 0) return fd;
    // Only a kernel without IPv6 moves on from "::" to "0.0.0.0"; a port in use is fatal.
    const bool no_ipv6 = error == EAFNOSUPPORT || error == EADDRNOTAVAIL;
    if (last || !no_ipv6) return cannot(std::strerror(error));
  }
  return cannot("no address");
}

// One client connection (non-blocking) and the moment it must be done by: every wait is for
// the time left, so a client that trickles bytes gets no more than the whole limit.
class TimedConnection {
 public:
  TimedConnection(int fd, absl::Duration limit) : fd_(fd), deadline_(absl::Now() + limit) {}

  // Up to `size` bytes; 0 at end of stream, -1 on error or when time is up.
  ssize_t Read(char* buffer, size_t size) {
    for (;;) {
      if (!WaitFor(POLLIN)) return -1;
      const ssize_t n = ::recv(fd_, buffer, size, 0);
      if (n >= 0) return n;
      if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) return -1;
    }
  }

  // Sends `response`, then ends the connection gracefully: our side is shut first and what the
  // client still sends is read and dropped for at most 200 ms, so that closing with unread bytes
  // does not reset the connection and destroy the response before the client reads it.
  void Reply(absl::string_view response) {
    while (!response.empty() && WaitFor(POLLOUT)) {
      const ssize_t n = ::send(fd_, response.data(), response.size(), MSG_NOSIGNAL);
      if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      if (n <= 0) return;  // the scraper went away
      response.remove_prefix(static_cast<size_t>(n));
    }
    ::shutdown(fd_, SHUT_WR);
    deadline_ = std::min(deadline_, absl::Now() + absl::Milliseconds(200));
    char sink[4096];
    while (Read(sink, sizeof(sink)) > 0) {
    }
  }

 private:
  bool WaitFor(short events) {
    for (;;) {
      const absl::Duration left = deadline_ - absl::Now();
      if (left <= absl::ZeroDuration()) return false;
      pollfd p = {fd_, events, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
      if (ready > 0) return true;
      if (ready < 0 && errno != EINTR) return false;
    }
  }

  const int fd_;
  absl::Time deadline_;
};

std::string Response(absl::string_view status, absl::string_view content_type,
                     absl::string_view body, bool with_body, absl::string_view extra_headers = "") {
  return absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: ", content_type,
                      "\r\nContent-Length: ", body.size(), "\r\n", extra_headers,
                      "Connection: close\r\n\r\n", with_body ? body : "");
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    absl::string_view address, Render render) {
  auto where = ParseListenAddress(address);
  if (!where.ok()) return where.status();
  auto listener = Listen(*where, address);
  if (!listener.ok()) return listener.status();
  sockaddr_storage bound{};
  socklen_t size = sizeof(bound);
  ::getsockname(listener->get(), reinterpret_cast<sockaddr*>(&bound), &size);
  std::unique_ptr<MetricsHttpServer> server(
      new MetricsHttpServer(FormatAddress(bound, size), std::move(render)));
  MetricsHttpServer* self = server.get();
  auto thread = AcceptThread::Start(*std::move(listener), SOCK_NONBLOCK, "metrics",
                                    [self](UniqueFd connection) { self->Answer(connection.get()); });
  if (!thread.ok()) return thread.status();
  server->thread_ = *std::move(thread);
  return server;
}

void MetricsHttpServer::Answer(int fd) {
  TimedConnection connection(fd, kConnectionLimit);
  std::string request;
  char buffer[1024];
  while (request.find("\r\n\r\n") == std::string::npos &&
         request.find("\n\n") == std::string::npos) {
    if (request.size() >= kMaxRequestBytes) {
      connection.Reply(Response("431 Request Header Fields Too Large", "text/plain",
                                "request too large\n", true));
      return;
    }
    const ssize_t n = connection.Read(buffer, sizeof(buffer));
    if (n <= 0) return;  // closed early, or not done within the limit
    request.append(buffer, static_cast<size_t>(n));
  }
  const absl::string_view first_line = absl::string_view(request).substr(0, request.find('\n'));
  const std::vector<absl::string_view> parts =
      absl::StrSplit(absl::StripAsciiWhitespace(first_line), ' ');
  if (parts.size() != 3 || !absl::StartsWith(parts[2], "HTTP/1.")) {
    connection.Reply(Response("400 Bad Request", "text/plain", "malformed request\n", true));
    return;
  }
  const bool head = parts[0] == "HEAD";
  if (parts[0] != "GET" && !head) {
    connection.Reply(Response("405 Method Not Allowed", "text/plain",
                                  "only GET and HEAD\n", true, "Allow: GET, HEAD\r\n"));
    return;
  }
  const absl::string_view path = parts[1].substr(0, parts[1].find('?'));
  if (path == "/metrics") {
    connection.Reply(Response("200 OK", "text/plain; version=0.0.4; charset=utf-8",
                                  render_(), !head));
  } else if (path == "/") {
    connection.Reply(Response("200 OK", "text/plain; charset=utf-8",
                                  "tensorbrokerd: metrics at /metrics\n", !head));
  } else {
    connection.Reply(Response("404 Not Found", "text/plain",
                                  "not found; metrics are at /metrics\n", !head));
  }
}

}  // namespace tensorbroker::daemon
