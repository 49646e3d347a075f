// --metrics-listen: serves the daemon's Prometheus metrics at http://ADDR/metrics (HTTP/1.0 and
// 1.1, GET and HEAD; every response closes its connection). For Prometheus to scrape directly;
// `tensorbroker stats --prometheus` prints the same text.
//
//   auto server = MetricsHttpServer::Start("127.0.0.1:9464", [&] { return Text(); });
//
// Scrapers are served side by side: one thread runs an epoll loop over the listening socket and
// every connection, all non-blocking, so a slow client (one that sends its request a byte at a
// time, or never reads its answer) delays no other. Bounded in every way: each connection has
// kConnectionLimit in all to send its request and take its answer, then it is closed; at most
// kMaxConnections are open, and one more closes the oldest to make room (a connection grows old
// only by being slow, so the newest is the likeliest to be a scraper done in a millisecond);
// requests are at most kMaxRequestBytes; no thread per connection.
// Threads: `render` is called on the loop thread and must be thread-safe. The destructor stops
// the loop, then closes every connection and the listening socket.
#ifndef TENSORBROKER_DAEMON_METRICS_HTTP_SERVER_H_
#define TENSORBROKER_DAEMON_METRICS_HTTP_SERVER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/unique_fd.h"
#include "daemon/metrics/metrics_http_request.h"

namespace tensorbroker::daemon {

class MetricsHttpServer {
 public:
  using Render = std::function<std::string()>;

  static constexpr size_t kMaxConnections = 64;
  static constexpr size_t kMaxRequestBytes = kMaxMetricsRequestBytes;
  static constexpr absl::Duration kConnectionLimit = absl::Seconds(2);  // reading and answering

  // Binds and listens on `address` (see ParseListenAddress), then serves on its own thread.
  // UNAVAILABLE naming --metrics-listen when the address cannot be bound; ErrnoStatus's code
  // when no epoll or eventfd can be had, INTERNAL when no thread.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(absl::string_view address,
                                                                  Render render);
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // Where it listens, with the port it got: "127.0.0.1:9464", "[::]:9464".
  const std::string& bound_address() const { return bound_address_; }

 private:
  class Connection;

  MetricsHttpServer(std::string bound_address, Render render, UniqueFd listener, UniqueFd epoll,
                    UniqueFd wake);
  void Loop();
  void AcceptAll();
  void Serve(uint64_t id, uint32_t events);
  void Watch(uint64_t id, const Connection& connection);
  void Close(uint64_t id);
  void CloseExpired();
  int NextTimeoutMs() const;

  const std::string bound_address_;
  const Render render_;
  const UniqueFd listener_;
  const UniqueFd epoll_;
  const UniqueFd wake_;
  // The loop thread's alone (the destructor's after the join).
  std::map<uint64_t, std::unique_ptr<Connection>> connections_;  // by id: oldest first
  uint64_t next_id_ = 1;
  absl::Time accept_paused_until_ = absl::InfinitePast();  // out of descriptors: wait a bit
  bool crowded_ = false;  // the cap was reached: logged once until every connection is gone
  std::thread loop_;      // last: started once the members it uses exist, joined first
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_METRICS_HTTP_SERVER_H_
