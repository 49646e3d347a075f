#include "daemon/metrics/call_metrics.h"

#include "common/mutex.h"

#include <algorithm>

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

std::vector<MethodStats> CallMetrics::Snapshot() const {
  MutexLock lock(mu_);
  std::vector<MethodStats> out;
  for (const auto& [method, per] : methods_) {
    MethodStats stats;
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

}  // namespace tensorbroker::daemon
