// tensorbroker.v1.Broker over gRPC: turns wire messages into validated TensorStore calls and
// store results back into wire messages. Every field from the client is validated here
// (name, dtype, shape, strides, sizes, readers) before the store sees it; the store checks
// state. Every call's principal comes from the kernel (PeerRegistry) through the AccessPolicy.
//
// Each call is logged as one line naming the method, the tensor (or lease), the client's pid
// and uid (from the kernel, see PeerRegistry) and, for failures, the status code: failures by
// severity, successful calls at debug (a producer may publish thousands of tensors a second).
//
// Every method uses gRPC's callback API: no call holds a thread while it waits. A Get that
// waits is an entry in the store and one in the DeadlineTimer (WaitingGet); Put and Read
// streams are reactors (PutReactor, ReadReactor) that move a chunk per reaction.
// Thread-safe: holds no state of its own beyond pointers to thread-safe objects.
#ifndef TENSORBROKER_DAEMON_BROKER_SERVICE_H_
#define TENSORBROKER_DAEMON_BROKER_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <optional>

#include "absl/functional/function_ref.h"
#include "daemon/base/deadline_timer.h"
#include "daemon/base/log.h"
#include "daemon/frontend/grpc/session_reactor.h"
#include "daemon/identity/peer_registry.h"
#include "daemon/metrics/call_log.h"
#include "daemon/metrics/call_metrics.h"
#include "daemon/metrics/peer_traffic.h"
#include "daemon/store/access_policy.h"
#include "daemon/store/tensor_store.h"
#include "tensorbroker/v1/broker.grpc.pb.h"

namespace tensorbroker::daemon {

// Largest Put data chunk accepted (clients may send smaller ones).
inline constexpr size_t kMaxPutChunkBytes = 4 << 20;
// Largest Read data chunk sent: within every gRPC client's default 4 MiB receive limit.
inline constexpr size_t kMaxReadChunkBytes = 1 << 20;
// List pages: the default and the most tensors per answer.
inline constexpr size_t kDefaultListPage = 500;
inline constexpr size_t kMaxListPage = 1000;
// Most calls in flight on one gRPC connection (HTTP/2 MAX_CONCURRENT_STREAMS); more wait in the
// client until one ends.
inline constexpr size_t kMaxCallsPerGrpcConnection = 256;

// What every call handler needs: the parts of the daemon it calls into. All must outlive the
// service's calls.
struct ServiceParts {
  TensorStore* store = nullptr;
  SessionRegistry* sessions = nullptr;
  const CallMetrics* metrics = nullptr;  // may be null: Stats then reports no methods
  const PeerRegistry* peers = nullptr;
  const AccessPolicy* policy = nullptr;
  DeadlineTimer* timer = nullptr;
  PeerTraffic* peer_traffic = nullptr;                 // may be null: Stats then reports no peers
  absl::Duration pending_timeout = absl::Seconds(60);  // --pending-timeout
};

class BrokerService final : public v1::Broker::CallbackService {
 public:
  explicit BrokerService(const ServiceParts& parts);

  grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionEvent>* Session(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* Create(grpc::CallbackServerContext*, const v1::CreateRequest*,
                                   v1::TensorGrant*) override;
  grpc::ServerUnaryReactor* Seal(grpc::CallbackServerContext*, const v1::SealRequest*,
                                 v1::TensorInfo*) override;
  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext*, const v1::AbortRequest*,
                                  v1::Empty*) override;
  grpc::ServerReadReactor<v1::PutRequest>* Put(grpc::CallbackServerContext*,
                                               v1::TensorInfo*) override;
  grpc::ServerWriteReactor<v1::ReadResponse>* Read(grpc::CallbackServerContext*,
                                                   const v1::ReadRequest*) override;
  // Read, with the data bytes sent added to `sent_bytes` (a peer's counter).
  grpc::ServerWriteReactor<v1::ReadResponse>* CountedRead(grpc::CallbackServerContext*,
                                                          const v1::ReadRequest*,
                                                          std::atomic<uint64_t>* sent_bytes);
  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext*, const v1::GetRequest*,
                                v1::TensorGrant*) override;
  grpc::ServerWriteReactor<v1::WatchEvent>* Watch(grpc::CallbackServerContext*,
                                                  const v1::WatchRequest*) override;
  grpc::ServerUnaryReactor* Release(grpc::CallbackServerContext*, const v1::ReleaseRequest*,
                                    v1::Empty*) override;
  grpc::ServerUnaryReactor* Retain(grpc::CallbackServerContext*, const v1::RetainRequest*,
                                   v1::TensorGrant*) override;
  grpc::ServerUnaryReactor* Delete(grpc::CallbackServerContext*, const v1::DeleteRequest*,
                                   v1::Empty*) override;
  grpc::ServerUnaryReactor* List(grpc::CallbackServerContext*, const v1::ListRequest*,
                                 v1::ListResponse*) override;
  grpc::ServerUnaryReactor* Stat(grpc::CallbackServerContext*, const v1::StatRequest*,
                                 v1::TensorInfo*) override;
  grpc::ServerUnaryReactor* Stats(grpc::CallbackServerContext*, const v1::StatsRequest*,
                                  v1::BrokerStats*) override;
  grpc::ServerUnaryReactor* Ping(grpc::CallbackServerContext*, const v1::Empty*,
                                 v1::Empty*) override;

  // What Stats answers `caller`: the store's counters (each user named), the per-method call
  // metrics and, for an administrator, each peer's traffic. Thread-safe.
  v1::BrokerStats CurrentStats(const Principal& caller) const;

 private:
  // "pid=123 uid=1000": the kernel's credentials of the call's connection.
  std::string Client(const grpc::ServerContextBase* context) const;
  // The call's principal; PERMISSION_DENIED when the kernel's credentials are unknown.
  absl::StatusOr<Principal> Caller(const grpc::ServerContextBase* context) const;
  // A session may be used only by connections of the uid that opened it.
  absl::Status CheckSessionCaller(const grpc::ServerContextBase* context,
                                  const std::string& session_id) const;
  // Logs a failed call (its level by status code) with its subject and code; converts to gRPC.
  grpc::Status Answer(const grpc::ServerContextBase* context, absl::string_view method,
                      LogText what, const absl::Status& status) const;
  void LogSuccess(LogLevel level, const grpc::ServerContextBase* context, absl::string_view method,
                  LogText what, LogText outcome) const;

  grpc::Status DoCreate(grpc::CallbackServerContext*, const v1::CreateRequest&, v1::TensorGrant*);
  grpc::Status DoSeal(grpc::CallbackServerContext*, const v1::SealRequest&, v1::TensorInfo*);
  grpc::Status DoAbort(grpc::CallbackServerContext*, const v1::AbortRequest&);
  grpc::Status DoRelease(grpc::CallbackServerContext*, const v1::ReleaseRequest&);
  grpc::Status DoRetain(grpc::CallbackServerContext*, const v1::RetainRequest&, v1::TensorGrant*);
  grpc::Status DoDelete(grpc::CallbackServerContext*, const v1::DeleteRequest&);
  grpc::Status DoList(grpc::CallbackServerContext*, const v1::ListRequest&, v1::ListResponse*);
  grpc::Status DoStat(grpc::CallbackServerContext*, const v1::StatRequest&, v1::TensorInfo*);
  grpc::Status DoStats(grpc::CallbackServerContext*, v1::BrokerStats*);

  const ServiceParts parts_;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_BROKER_SERVICE_H_
