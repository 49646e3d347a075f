#include "daemon/metrics_http_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

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
#include "daemon/log.h"

namespace tensorbroker::daemon {
namespace {

constexpr size_t kMaxRequestBytes = 8192;
constexpr int kIoTimeoutSeconds = 2;


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

// A listening TCP socket on `host` (empty: every interface, IPv6 and IPv4) and `port`.
absl::StatusOr<UniqueFd> Listen(const ListenAddress& where, absl::string_view text) {
  // Every interface: "::" accepting IPv4 too where the kernel allows, else "0.0.0.0".
  std::vector<std::string> hosts = {where.host};
  if (where.host.empty()) hosts = {"::", "0.0.0.0"};
  std::string last_error = "no address";
  for (const std::string& host : hosts) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* found = nullptr;
    const std::string port = absl::StrCat(where.port);
    if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
      last_error = ::gai_strerror(rc);
      continue;
    }
    std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owned(found, &::freeaddrinfo);
    for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
      UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
      if (!fd.valid()) {
        last_error = std::strerror(errno);
        continue;
      }
      const int on = 1;
      const int off = 0;
      ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
      if (ai->ai_family == AF_INET6 && where.host.empty()) {
        ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
      }
      if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd.get(), 16) != 0) {
        last_error = std::strerror(errno);
        continue;
      }
      return fd;
    }
  }
  return absl::UnavailableError(
      absl::StrCat("--metrics-listen: cannot listen on ", text, ": ", last_error));
}

void WriteAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the scraper went away or stalled past the timeout
    data.remove_prefix(static_cast<size_t>(n));
  }
}

// Sends `response`, then ends the connection gracefully: our side is shut first and what the
// client still sends is read and dropped (briefly), so that closing with unread bytes does not
// reset the connection and destroy the response before the client reads it.
void Reply(int fd, absl::string_view response) {
  WriteAll(fd, response);
  ::shutdown(fd, SHUT_WR);
  timeval drain_limit{0, 200000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &drain_limit, sizeof(drain_limit));
  char sink[4096];
  for (size_t drained = 0; drained < (1 << 20);) {
    const ssize_t n = ::recv(fd, sink, sizeof(sink), 0);
    if (n <= 0) return;
    drained += static_cast<size_t>(n);
  }
}

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
  auto thread = AcceptThread::Start(*std::move(listener), 0, "metrics",
                                    [self](UniqueFd connection) { self->Answer(connection.get()); });
  if (!thread.ok()) return thread.status();
  server->thread_ = *std::move(thread);
  return server;
}

void MetricsHttpServer::Answer(int connection) {
  timeval timeout{kIoTimeoutSeconds, 0};
  ::setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  ::setsockopt(connection, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  std::string request;
  char buffer[1024];
  while (request.find("\r\n\r\n") == std::string::npos &&
         request.find("\n\n") == std::string::npos) {
    if (request.size() >= kMaxRequestBytes) {
      Reply(connection, Response("431 Request Header Fields Too Large", "text/plain",
                                    "request too large\n", true));
      return;
    }
    const ssize_t n = ::recv(connection, buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // closed early, or silent past the timeout
    request.append(buffer, static_cast<size_t>(n));
  }
  const absl::string_view first_line = absl::string_view(request).substr(0, request.find('\n'));
  const std::vector<absl::string_view> parts =
      absl::StrSplit(absl::StripAsciiWhitespace(first_line), ' ');
  if (parts.size() != 3 || !absl::StartsWith(parts[2], "HTTP/1.")) {
    Reply(connection, Response("400 Bad Request", "text/plain", "malformed request\n", true));
    return;
  }
  const bool head = parts[0] == "HEAD";
  if (parts[0] != "GET" && !head) {
    Reply(connection, Response("405 Method Not Allowed", "text/plain",
                                  "only GET and HEAD\n", true, "Allow: GET, HEAD\r\n"));
    return;
  }
  const absl::string_view path = parts[1].substr(0, parts[1].find('?'));
  if (path == "/metrics") {
    Reply(connection, Response("200 OK", "text/plain; version=0.0.4; charset=utf-8",
                                  render_(), !head));
  } else if (path == "/") {
    Reply(connection, Response("200 OK", "text/plain; charset=utf-8",
                                  "tensorbrokerd: metrics at /metrics\n", !head));
  } else {
    Reply(connection, Response("404 Not Found", "text/plain",
                                  "not found; metrics are at /metrics\n", !head));
  }
}

}  // namespace tensorbroker::daemon
