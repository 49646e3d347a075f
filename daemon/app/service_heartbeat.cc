#include "daemon/app/service_heartbeat.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "common/mutex.h"
#include "daemon/app/service_notifier.h"
#include "daemon/base/log.h"
#include "tensorbroker/v1/broker.grpc.pb.h"

namespace tensorbroker::daemon {

ServiceHeartbeat::ServiceHeartbeat(std::string socket_path, std::optional<absl::Duration> watchdog,
                                   absl::Duration status_period)
    : socket_path_(std::move(socket_path)),
      watchdog_(watchdog),
      period_(watchdog.has_value() ? *watchdog / 2 : status_period) {
  thread_ = std::thread([this] { Run(); });
}

ServiceHeartbeat::~ServiceHeartbeat() { Stop(); }

void ServiceHeartbeat::Stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::optional<std::string> ServiceHeartbeat::Check(absl::Duration deadline) const {
  auto channel = grpc::CreateChannel("unix:" + socket_path_, grpc::InsecureChannelCredentials());
  auto stub = v1::Broker::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(deadline));
  v1::StatsRequest request;
  v1::BrokerStats stats;
  grpc::Status status = stub->Stats(&context, request, &stats);
  if (!status.ok()) {
    Log(LogLevel::kWarning, "health check of the serving path failed: ", status.error_message(),
        " (code ", static_cast<int>(status.error_code()), ")");
    return std::nullopt;
  }
  return absl::StrCat("serving ", stats.tensors(), " tensor(s), ",
                      FormatByteSize(stats.used_bytes()), " of ",
                      FormatByteSize(stats.capacity_bytes()), " used, ", stats.leases(),
                      " lease(s), ", stats.clients(), " client(s)");
}

void ServiceHeartbeat::Run() {
  MutexLock lock(mu_);
  while (!stopping_) {
    lock.unlock();
    // The check must finish well within the watchdog timeout to count.
    const absl::Duration deadline = std::min(period_, absl::Seconds(5));
    if (std::optional<std::string> status = Check(deadline); status.has_value()) {
      if (watchdog_.has_value()) NotifyWatchdog();
      NotifyStatus(*status);
    }
    lock.lock();
    const auto until = std::chrono::steady_clock::now() + absl::ToChronoMilliseconds(period_);
    while (!stopping_ && wake_.wait_until(lock, until) != std::cv_status::timeout) {
    }
  }
}

}  // namespace tensorbroker::daemon
