// A gRPC server interceptor that records every call (method, status code, duration from the
// call's start to its status) into CallMetrics.
// Ownership: the factory is handed to the ServerBuilder; `metrics` must outlive the server.
#ifndef TENSORBROKER_DAEMON_METRICS_INTERCEPTOR_H_
#define TENSORBROKER_DAEMON_METRICS_INTERCEPTOR_H_

#include <grpcpp/support/server_interceptor.h>

#include <memory>

#include "daemon/call_metrics.h"

namespace tensorbroker::daemon {

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> MetricsInterceptorFactory(
    CallMetrics* metrics);

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_METRICS_INTERCEPTOR_H_
