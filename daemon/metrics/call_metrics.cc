#include "daemon/metrics/call_metrics.h"

#include "common/mutex.h"

#include <algorithm>

#include "tensorbroker/v1/broker.pb.h"

namespace tensorbroker::daemon {

void CallMetrics::Record(const std::string& method, int code, absl::Duration duration, bool timed) {
  MutexLock lock(mu_);
  PerMethod& per = methods_[method];
  ++per.calls[code];
  if (!timed) return;
  const double seconds = absl::ToDoubleSeconds(duration);
  const size_t bucket =
      static_cast<size_t>(std::lower_bound(kBucketBounds.begin(), kBucketBounds.end(), seconds) -
                          kBucketBounds.begin());
  ++per.buckets[bucket];
  per.sum_seconds += seconds;
  ++per.timed;
}

std::vector<MethodCalls> CallMetrics::Snapshot() const {
  MutexLock lock(mu_);
  std::vector<MethodCalls> out;
  for (const auto& [method, per] : methods_) {
    MethodCalls stats;
    stats.method = method;
    stats.calls.assign(per.calls.begin(), per.calls.end());
    stats.bucket_bounds_seconds.assign(kBucketBounds.begin(), kBucketBounds.end());
    stats.bucket_counts.assign(per.buckets.begin(), per.buckets.end());
    stats.latency_sum_seconds = per.sum_seconds;
    stats.latency_count = per.timed;
    out.push_back(std::move(stats));
  }
  return out;
}

void ToProto(const MethodCalls& calls, v1::MethodStats* out) {
  out->set_method(calls.method);
  for (const auto& [code, count] : calls.calls) {
    v1::MethodStats::CodeCount* call = out->add_calls();
    call->set_code(code);
    call->set_count(count);
  }
  out->mutable_bucket_bounds_seconds()->Assign(calls.bucket_bounds_seconds.begin(),
                                               calls.bucket_bounds_seconds.end());
  out->mutable_bucket_counts()->Assign(calls.bucket_counts.begin(), calls.bucket_counts.end());
  out->set_latency_sum_seconds(calls.latency_sum_seconds);
  out->set_latency_count(calls.latency_count);
}

}  // namespace tensorbroker::daemon
