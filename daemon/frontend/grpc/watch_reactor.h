// A Watch stream as a gRPC callback reactor: events come from the store's watch log
// (TensorStore::Watch, watch_hub.h) one write at a time, the next taken when the previous write
// is done. A watcher with nothing to read is parked in the log and woken by the next event it
// may see; a slow one holds no thread and no memory beyond one event (the log is shared and
// bounded: falling behind it gives a LOST event, never a slower daemon).
//
// The initial metadata goes out once the watch is registered, so a client that waits for it
// knows every later event reaches it.
// Lifetime: made by BrokerService::Watch, deletes itself in OnDone, which ends the watch. The
// log's wake callback may run after that: it reaches the reactor only through `link_`, which
// OnDone cuts under its mutex.
// Threading: gRPC's reactions and the wake (on whichever thread published) may run at once;
// `link_->mu` serialises them.
#ifndef TENSORBROKER_DAEMON_WATCH_REACTOR_H_
#define TENSORBROKER_DAEMON_WATCH_REACTOR_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "daemon/store/tensor_store.h"
#include "tensorbroker/v1/broker.pb.h"

namespace tensorbroker::daemon {

class WatchReactor final : public grpc::ServerWriteReactor<v1::WatchEvent> {
 public:
  WatchReactor(TensorStore* store, const absl::StatusOr<Principal>& caller, std::string client,
               const v1::WatchRequest& request);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  struct Link {
    Mutex mu;
    WatchReactor* reactor = nullptr;  // null once OnDone ran
  };
  // Writes the next event if none is in flight; finishes on an error. Holds link_->mu.
  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(link_->mu);
  void FinishLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(link_->mu);

  TensorStore* const store_;
  const std::string client_;
  const std::string prefix_;
  std::shared_ptr<Link> link_ = std::make_shared<Link>();
  uint64_t watcher_id_ = 0;  // 0: not watching (refused)
  v1::WatchEvent event_;     // in flight until OnWriteDone
  bool writing_ ABSL_GUARDED_BY(link_->mu) = false;
  bool finished_ ABSL_GUARDED_BY(link_->mu) = false;
  uint64_t sent_ ABSL_GUARDED_BY(link_->mu) = 0;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_WATCH_REACTOR_H_
