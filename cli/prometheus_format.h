// The daemon's counters in the Prometheus text exposition format (0.0.4), for
// `tensorbroker stats --prometheus` and node_exporter's textfile collector. Pure function.
#ifndef TENSORBROKER_CLI_PROMETHEUS_FORMAT_H_
#define TENSORBROKER_CLI_PROMETHEUS_FORMAT_H_

#include <string>

#include "tensorbroker/types.h"

namespace tensorbroker::cli {

// Gauges per memory pool (label device="cpu"|"cuda:N": capacity, used, reserved bytes,
// segments), gauges for tensors, leases, clients and pending tensors, calls_total by method and
// code, and a call duration histogram per method.
std::string PrometheusText(const BrokerStats& stats);

}  // namespace tensorbroker::cli

#endif  // TENSORBROKER_CLI_PROMETHEUS_FORMAT_H_
