// Counts of the daemon's calls by method and status code, and a latency histogram per method,
// for Stats and the Prometheus metrics. Fed by MetricsInterceptor (one place for every gRPC
// method, the health service's included) and by the local channel (fixed names), so the set of
// methods is bounded: a gRPC method outside the API is recorded as kUnknownMethod.
// Thread-safe: one mutex; Record is a few map operations.
#ifndef TENSORBROKER_DAEMON_CALL_METRICS_H_
#define TENSORBROKER_DAEMON_CALL_METRICS_H_

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "common/mutex.h"

namespace tensorbroker::v1 {
class MethodStats;
}  // namespace tensorbroker::v1

namespace tensorbroker::daemon {

// One method's calls since the daemon started: counts by status code and a latency histogram
// (streams that last a session are counted, not timed).
struct MethodCalls {
  std::string method;                           // "Create", ..., or kUnknownMethod
  std::vector<std::pair<int, uint64_t>> calls;  // (grpc status code, count), by code
  std::vector<double> bucket_bounds_seconds;    // upper bounds; +Inf is the last count
  std::vector<uint64_t> bucket_counts;          // per bucket, not cumulative; one more
  double latency_sum_seconds = 0;
  uint64_t latency_count = 0;
};

// The Stats reply's row of `calls` (v1.MethodStats).
void ToProto(const MethodCalls& calls, v1::MethodStats* out);

// The label of every gRPC call to a method the daemon does not serve.
inline constexpr char kUnknownMethod[] = "unknown";

class CallMetrics {
 public:
  // Upper bounds of the latency buckets, in seconds (the last bucket, +Inf, is implicit).
  static constexpr std::array<double, 16> kBucketBounds = {
      0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
      0.025,   0.05,   0.1,     0.25,   0.5,   1.0,    2.5,   10.0};

  // `timed`: false for calls whose duration is a connection's life (the Session stream): they
  // are counted, not put into the histogram.
  void Record(const std::string& method, int code, absl::Duration duration, bool timed);
  std::vector<MethodCalls> Snapshot() const;  // by method name

 private:
  struct PerMethod {
    std::map<int, uint64_t> calls;                             // by status code
    std::array<uint64_t, kBucketBounds.size() + 1> buckets{};  // not cumulative; last: +Inf
    double sum_seconds = 0;
    uint64_t timed = 0;
  };
  mutable Mutex mu_;
  std::map<std::string, PerMethod> methods_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_CALL_METRICS_H_
