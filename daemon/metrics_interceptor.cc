#include "daemon/metrics_interceptor.h"

#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/clock.h"

namespace tensorbroker::daemon {
namespace {

using grpc::experimental::InterceptionHookPoints;

// "/tensorbroker.v1.Broker/Create" -> "Create"; other services keep their full name.
std::string MethodLabel(absl::string_view full) {
  constexpr absl::string_view kBroker = "/tensorbroker.v1.Broker/";
  if (full.substr(0, kBroker.size()) == kBroker) return std::string(full.substr(kBroker.size()));
  return std::string(full);
}

class MetricsInterceptor final : public grpc::experimental::Interceptor {
 public:
  MetricsInterceptor(CallMetrics* metrics, grpc::experimental::ServerRpcInfo* info)
      : metrics_(metrics),
        method_(MethodLabel(info->method() != nullptr ? info->method() : "")),
        timed_(info->type() != grpc::experimental::ServerRpcInfo::Type::BIDI_STREAMING),
        started_(absl::Now()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      metrics_->Record(method_, static_cast<int>(methods->GetSendStatus().error_code()),
                       absl::Now() - started_, timed_);
    }
    methods->Proceed();
  }

 private:
  CallMetrics* metrics_;
  std::string method_;
  bool timed_;
  absl::Time started_;
};

class Factory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit Factory(CallMetrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new MetricsInterceptor(metrics_, info);
  }

 private:
  CallMetrics* metrics_;
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> MetricsInterceptorFactory(
    CallMetrics* metrics) {
  return std::make_unique<Factory>(metrics);
}

}  // namespace tensorbroker::daemon
