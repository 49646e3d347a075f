// The --metrics-listen HTTP server on a real loopback socket, with an answer far larger than
// the socket buffers: a client that asks and then reads nothing holds a half-sent answer, and
// a scrape beside it is still answered in full (the server writes only what a client takes).
#include "daemon/metrics/metrics_http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"
#include "common/unique_fd.h"

namespace tensorbroker::daemon {
namespace {

// A blocking client socket connected to `address` ("127.0.0.1:PORT"); `receive_buffer` > 0
// shrinks its receive buffer first.
UniqueFd Connect(absl::string_view address, int receive_buffer = 0) {
  const size_t colon = address.rfind(':');
  uint32_t port = 0;
  EXPECT_TRUE(absl::SimpleAtoi(address.substr(colon + 1), &port)) << address;
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  EXPECT_TRUE(fd.valid());
  if (receive_buffer > 0) {
    ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof(receive_buffer));
  }
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<const sockaddr*>(&to), sizeof(to)), 0);
  return fd;
}

void SendAll(int fd, absl::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    ASSERT_GT(n, 0);
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

// Everything the server sends until it closes.
std::string ReadAll(int fd) {
  std::string out;
  char buffer[65536];
  ssize_t n;
  while ((n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0)
    out.append(buffer, static_cast<size_t>(n));
  return out;
}

constexpr absl::string_view kRequest = "GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n";

TEST(MetricsHttpServer, AnswersAScrapeInFullBesideAClientThatReadsNothing) {
  const std::string text(8 << 20, 'm');  // far more than the kernel buffers of a connection
  auto server = MetricsHttpServer::Start("127.0.0.1:0", [&text] { return text; });
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = (*server)->bound_address();

  UniqueFd stuck = Connect(address, 4096);
  SendAll(stuck.get(), kRequest);
  char first = 0;
  // Its answer has begun (and cannot all be sent): the server is now mid-answer to it.
  ASSERT_EQ(::recv(stuck.get(), &first, 1, MSG_PEEK), 1);

  UniqueFd scraper = Connect(address);
  SendAll(scraper.get(), kRequest);
  const std::string answer = ReadAll(scraper.get());
  const std::string head =
      "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
      "Content-Length: 8388608\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(answer.size(), head.size() + text.size());
  EXPECT_EQ(answer.substr(0, head.size()), head);
  EXPECT_TRUE(absl::EndsWith(answer, text));
}

TEST(MetricsHttpServer, RequestsArriveInPiecesAndMalformedOnesAreAnswered) {
  auto server = MetricsHttpServer::Start("127.0.0.1:0", [] { return std::string("m 1\n"); });
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = (*server)->bound_address();
  // One byte per send: the request is put together across reads.
  UniqueFd piecewise = Connect(address);
  for (char c : kRequest) SendAll(piecewise.get(), absl::string_view(&c, 1));
  EXPECT_TRUE(absl::StartsWith(ReadAll(piecewise.get()), "HTTP/1.1 200 OK\r\n"));
  UniqueFd garbage = Connect(address);
  SendAll(garbage.get(), "garbage\r\n\r\n");
  EXPECT_TRUE(absl::StartsWith(ReadAll(garbage.get()), "HTTP/1.1 400 Bad Request\r\n"));
  UniqueFd huge = Connect(address);
  SendAll(huge.get(), "GET /metrics HTTP/1.1\r\nX: " + std::string(10000, 'a'));
  EXPECT_TRUE(
      absl::StartsWith(ReadAll(huge.get()), "HTTP/1.1 431 Request Header Fields Too Large\r\n"));
}

TEST(MetricsHttpServer, AnAddressInUseIsRefusedNamingTheFlag) {
  auto first = MetricsHttpServer::Start("127.0.0.1:0", [] { return std::string(); });
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = MetricsHttpServer::Start((*first)->bound_address(), [] { return std::string(); });
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StartsWith(second.status().message(), "--metrics-listen: cannot listen on"))
      << second.status();
}

}  // namespace
}  // namespace tensorbroker::daemon
