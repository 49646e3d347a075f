// --metrics-listen: serves the daemon's Prometheus metrics at http://ADDR/metrics (HTTP/1.0 and
// 1.1, GET and HEAD; every response closes its connection). For Prometheus to scrape directly;
// `tensorbroker stats --prometheus` prints the same text.
// One AcceptThread owned by the server answers one connection at a time, each with a 2 s limit on
// reading the request and on writing the answer, so a stuck scraper costs seconds, never the
// gRPC service. `render` is called on that thread and must be thread-safe.
#ifndef TENSORBROKER_DAEMON_METRICS_HTTP_SERVER_H_
#define TENSORBROKER_DAEMON_METRICS_HTTP_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/accept_thread.h"
#include "daemon/listen_address.h"

namespace tensorbroker::daemon {

class MetricsHttpServer {
 public:
  using Render = std::function<std::string()>;

  // Binds and listens on `address` (see ParseListenAddress), then serves on its own thread.
  // UNAVAILABLE naming --metrics-listen when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(absl::string_view address,
                                                                  Render render);
  // Stops serving: ends the thread, closes the socket.
  ~MetricsHttpServer() = default;
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // Where it listens, with the port it got: "127.0.0.1:9464", "[::]:9464".
  const std::string& bound_address() const { return bound_address_; }

 private:
  MetricsHttpServer(std::string bound_address, Render render)
      : bound_address_(std::move(bound_address)), render_(std::move(render)) {}
  void Answer(int connection);

  const std::string bound_address_;
  const Render render_;
  std::unique_ptr<AcceptThread> thread_;  // last: stopped before the members it uses go
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_METRICS_HTTP_SERVER_H_
