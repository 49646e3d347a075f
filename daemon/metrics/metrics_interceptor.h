// A gRPC server interceptor that records every call (method, status code, duration from the
// call's start to its status) into CallMetrics, under MethodLabel's label: the number of series
// is fixed by the API, never by the method names clients send.
// Ownership: the factory is handed to the ServerBuilder; `metrics` must outlive the server.
// Thread-safe: interceptors run on gRPC's threads; MethodLabel reads a set built once.
#ifndef TENSORBROKER_DAEMON_METRICS_INTERCEPTOR_H_
#define TENSORBROKER_DAEMON_METRICS_INTERCEPTOR_H_

#include <grpcpp/support/server_interceptor.h>

#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "daemon/metrics/call_metrics.h"

namespace tensorbroker::daemon {

// The label a call to `full_name` ("/package.Service/Method") is counted under: a
// tensorbroker.v1.Broker method by its short name ("Create"), a grpc.health.v1.Health method
// (Check, Watch) by its full name, anything else (whatever a client made up, a made-up method
// of those two services included) as kUnknownMethod.
std::string MethodLabel(absl::string_view full_name);

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> MetricsInterceptorFactory(
    CallMetrics* metrics);

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_METRICS_INTERCEPTOR_H_
