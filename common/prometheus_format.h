// The daemon's counters in the Prometheus text exposition format (0.0.4): `tensorbroker stats
// --prometheus` (node_exporter's textfile collector) and the daemon's --metrics-listen /metrics.
// Pure function.
#ifndef TENSORBROKER_COMMON_PROMETHEUS_FORMAT_H_
#define TENSORBROKER_COMMON_PROMETHEUS_FORMAT_H_

#include <string>

#include "tensorbroker/types.h"

namespace tensorbroker {

// The gauges of common/stats_schema.h: each kPoolStatsFields row per memory pool (label
// device="cpu"|"cuda:N"), each kBrokerStatsFields row that has a metric name, each
// kUserStatsFields row per user (labels uid, user); the counters of each kPeerStatsFields row
// per peer (label peer); then calls_total by method and code, and a call duration histogram per
// method.
std::string PrometheusText(const BrokerStats& stats);

}  // namespace tensorbroker

#endif  // TENSORBROKER_COMMON_PROMETHEUS_FORMAT_H_
