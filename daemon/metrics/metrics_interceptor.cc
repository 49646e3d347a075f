#include "daemon/metrics/metrics_interceptor.h"

#include <functional>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "google/protobuf/descriptor.h"
#include "tensorbroker/v1/broker.pb.h"

namespace tensorbroker::daemon {
namespace {

using grpc::experimental::InterceptionHookPoints;

constexpr absl::string_view kBrokerPrefix = "/tensorbroker.v1.Broker/";

// Full names of every method the daemon serves, built once from broker.proto's descriptor (so a
// method added there is counted under its name with no change here). Never destroyed: gRPC's
// threads may still look names up while the process exits.
const std::set<std::string, std::less<>>& ServedMethods() {
  static const auto* const served = [] {
    auto* names = new std::set<std::string, std::less<>>;
    const google::protobuf::ServiceDescriptor* broker =
        v1::Empty::descriptor()->file()->FindServiceByName("Broker");
    for (int i = 0; broker != nullptr && i < broker->method_count(); ++i) {
      names->insert(absl::StrCat(kBrokerPrefix, broker->method(i)->name()));
    }
    // gRPC's default health service (grpc::EnableDefaultHealthCheckService) serves these two.
    names->insert("/grpc.health.v1.Health/Check");
    names->insert("/grpc.health.v1.Health/Watch");
    return names;
  }();
  return *served;
}

class MetricsInterceptor final : public grpc::experimental::Interceptor {
 public:
  MetricsInterceptor(CallMetrics* metrics, grpc::experimental::ServerRpcInfo* info)
      : metrics_(metrics),
        method_(MethodLabel(info->method() != nullptr ? info->method() : "")),
        // A made-up method's duration says nothing about the daemon, nor does a stream that
        // lasts as long as its client wants (Session, Watch): counted, not timed.
        timed_(method_ != kUnknownMethod && method_ != "Watch" &&
               info->type() != grpc::experimental::ServerRpcInfo::Type::BIDI_STREAMING),
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

std::string MethodLabel(absl::string_view full_name) {
  if (ServedMethods().count(full_name) == 0) return kUnknownMethod;
  if (absl::StartsWith(full_name, kBrokerPrefix)) {
    return std::string(full_name.substr(kBrokerPrefix.size()));
  }
  return std::string(full_name);
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> MetricsInterceptorFactory(
    CallMetrics* metrics) {
  return std::make_unique<Factory>(metrics);
}

}  // namespace tensorbroker::daemon
