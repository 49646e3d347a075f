// A Put stream as a gRPC callback reactor: the header reserves the tensor (TensorStore::BeginPut
// with the caller's principal and readers), each data message is copied in as it arrives, and
// the client's half-close publishes it. A stream that stalls holds no thread; when the pending
// timeout aborts it (the store's expiry callback), the call ends at once with
// DEADLINE_EXCEEDED and its name is free again.
//
// Lifetime: made by BrokerService::Put, deletes itself in OnDone (which cancels an unfinished
// Put). Threading: gRPC's reactions come one at a time; the expiry callback comes from the
// timer's thread. `Shared` (kept alive by that callback too) decides, under its mutex, who
// finishes the call, and no read is started once it is finished.
#ifndef TENSORBROKER_DAEMON_PUT_REACTOR_H_
#define TENSORBROKER_DAEMON_PUT_REACTOR_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "daemon/base/deadline_timer.h"
#include "daemon/store/access_policy.h"
#include "daemon/store/tensor_store.h"
#include "tensorbroker/v1/broker.pb.h"

namespace tensorbroker::daemon {

class PutReactor final : public grpc::ServerReadReactor<v1::PutRequest> {
 public:
  // `caller` is the call's principal (an error refuses the call); `client` names it in logs.
  // A stream that sends no header within `pending_timeout` ends then (DEADLINE_EXCEEDED);
  // `timer` outlives the call.
  PutReactor(grpc::CallbackServerContext* context, TensorStore* store, const AccessPolicy* policy,
             DeadlineTimer* timer, absl::Duration pending_timeout, absl::StatusOr<Principal> caller,
             std::string client, v1::TensorInfo* response);

  void OnReadDone(bool ok) override;
  void OnDone() override;

 private:
  struct Shared {
    Mutex mu;
    bool finished = false;
    bool header_seen = false;
  };
  // Ends the call with `status` unless it has ended or `only_without_header` and the header
  // came; used from other threads (the timer, the store's expiry).
  static void EndFromOutside(const std::shared_ptr<Shared>& shared, PutReactor* reactor,
                             bool only_without_header, const std::string& name,
                             const absl::Status& status);
  // The first message: validates the header and reserves the tensor.
  absl::Status Begin();
  absl::Status Append();
  // Ends the call with `status` (logged when it is an error), or publishes for OK. Called with
  // `shared_->mu` held; the caller must not touch the reactor afterwards.
  void End(absl::Status status);

  grpc::CallbackServerContext* const context_;
  TensorStore* const store_;
  const AccessPolicy* const policy_;
  DeadlineTimer* const timer_;
  uint64_t header_timer_ = 0;
  const absl::StatusOr<Principal> caller_;
  const std::string client_;
  v1::TensorInfo* const response_;
  const std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
  v1::PutRequest message_;
  std::string name_;                 // from the header
  std::optional<PutTicket> ticket_;  // from Begin until published or cancelled
  uint64_t received_ = 0;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_PUT_REACTOR_H_
