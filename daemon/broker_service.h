// tensorbroker.v1.Broker over gRPC: turns wire messages into validated TensorStore calls and
// store results back into wire messages. Every field from the client is validated here
// (name, dtype, shape, strides, sizes) before the store sees it; the store checks state.
//
// Each call is logged as one line naming the method, the tensor (or lease), the client's pid
// and uid (from the kernel, see PeerRegistry) and, for failures, the status code: failures by
// severity, successful calls at debug (a producer may publish thousands of tensors a second).
//
// Session uses gRPC's callback API (a long-lived stream per client, no thread held);
// every other method is a synchronous handler on gRPC's thread pool.
// Thread-safe: holds no state of its own beyond pointers to thread-safe objects.
#ifndef TENSORBROKER_DAEMON_BROKER_SERVICE_H_
#define TENSORBROKER_DAEMON_BROKER_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <optional>

#include "absl/functional/function_ref.h"
#include "daemon/call_log.h"
#include "daemon/call_metrics.h"
#include "daemon/log.h"
#include "daemon/peer_registry.h"
#include "daemon/session_reactor.h"
#include "daemon/tensor_store.h"
#include "tensorbroker/v1/broker.grpc.pb.h"

namespace tensorbroker::daemon {

// Largest Put/Read data chunk. Clients may send smaller ones.
inline constexpr size_t kMaxChunkBytes = 4 << 20;

class BrokerService final : public v1::Broker::WithCallbackMethod_Session<v1::Broker::Service> {
 public:
  // `metrics` (may be null) is what Stats reports about calls; `peers` (may be null: clients
  // are then "pid=? uid=?") names the client of each call in log lines. Both must outlive the
  // service.
  BrokerService(TensorStore* store, SessionRegistry* sessions,
                const CallMetrics* metrics = nullptr, const PeerRegistry* peers = nullptr);

  grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionEvent>* Session(
      grpc::CallbackServerContext* context) override;

  grpc::Status Create(grpc::ServerContext*, const v1::CreateRequest*, v1::TensorGrant*) override;
  grpc::Status Seal(grpc::ServerContext*, const v1::SealRequest*, v1::TensorInfo*) override;
  grpc::Status Abort(grpc::ServerContext*, const v1::AbortRequest*, v1::Empty*) override;
  grpc::Status Put(grpc::ServerContext*, grpc::ServerReader<v1::PutRequest>*,
                   v1::TensorInfo*) override;
  grpc::Status Read(grpc::ServerContext*, const v1::ReadRequest*,
                    grpc::ServerWriter<v1::ReadResponse>*) override;
  grpc::Status Get(grpc::ServerContext*, const v1::GetRequest*, v1::TensorGrant*) override;
  grpc::Status Release(grpc::ServerContext*, const v1::ReleaseRequest*, v1::Empty*) override;
  grpc::Status Retain(grpc::ServerContext*, const v1::RetainRequest*, v1::TensorGrant*) override;
  grpc::Status Delete(grpc::ServerContext*, const v1::DeleteRequest*, v1::Empty*) override;
  grpc::Status List(grpc::ServerContext*, const v1::ListRequest*, v1::ListResponse*) override;
  grpc::Status Stat(grpc::ServerContext*, const v1::StatRequest*, v1::TensorInfo*) override;
  grpc::Status Stats(grpc::ServerContext*, const v1::StatsRequest*, v1::BrokerStats*) override;
  // What Stats answers: the store's counters and the per-method call metrics. Thread-safe.
  BrokerStats CurrentStats() const;
  grpc::Status Ping(grpc::ServerContext*, const v1::Empty*, v1::Empty*) override;

 private:
  // "pid=123 uid=1000": the kernel's credentials of the call's connection.
  std::string Client(const grpc::ServerContextBase* context) const;
  // The uid of the call's connection; nullopt when no PeerRegistry knows it.
  std::optional<uint32_t> CallerUid(const grpc::ServerContextBase* context) const;
  // A session may be used only by connections of the uid that opened it.
  absl::Status CheckSessionCaller(const grpc::ServerContextBase* context,
                                  const std::string& session_id) const;
  // Logs a failed call (its level by status code) with its subject and code; converts to gRPC.
  grpc::Status Answer(const grpc::ServerContextBase* context, absl::string_view method,
                      LogText what, const absl::Status& status) const;
  void LogSuccess(LogLevel level, const grpc::ServerContextBase* context,
                  absl::string_view method, LogText what, LogText outcome) const;

  TensorStore* const store_;
  const CallMetrics* const metrics_;
  SessionRegistry* const sessions_;
  const PeerRegistry* const peers_;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_BROKER_SERVICE_H_
