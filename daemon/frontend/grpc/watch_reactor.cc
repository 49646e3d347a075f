#include "daemon/frontend/grpc/watch_reactor.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "common/tensor_layout.h"
#include "common/wire/grpc_status.h"
#include "daemon/metrics/call_log.h"
#include "daemon/wire/store_proto.h"

namespace tensorbroker::daemon {

WatchReactor::WatchReactor(TensorStore* store, const absl::StatusOr<Principal>& caller,
                           std::string client, const v1::WatchRequest& request)
    : store_(store), client_(std::move(client)), prefix_(request.prefix()) {
  MutexLock lock(link_->mu);
  link_->reactor = this;
  absl::Status started = ValidatePrefix(prefix_);
  if (started.ok() && !caller.ok())
    started = absl::PermissionDeniedError(caller.status().message());
  if (!started.ok()) {
    FinishLocked(started);
    return;
  }
  std::optional<uint64_t> after;
  if (request.has_after_version()) after = request.after_version();
  // The wake holds the link, never the reactor: it may come after OnDone.
  // (link->mu is the reactor's link_->mu, which the analysis cannot tell from the pointer.)
  auto watcher =
      store_->Watch(*caller, prefix_, after, [link = link_]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        MutexLock lock(link->mu);
        if (link->reactor != nullptr) link->reactor->PumpLocked();
      });
  if (!watcher.ok()) {
    FinishLocked(watcher.status());
    return;
  }
  watcher_id_ = *watcher;
  // Registered: the initial metadata tells the client so (every event from now on reaches it).
  StartSendInitialMetadata();
  PumpLocked();
}

void WatchReactor::PumpLocked() {
  if (writing_ || finished_) return;
  auto events = store_->TakeEvents(watcher_id_, 1);
  if (!events.ok()) {
    FinishLocked(events.status());
    return;
  }
  if (events->empty()) return;  // parked: the next event wakes us
  event_.Clear();
  ToProto(events->front(), &event_);
  writing_ = true;
  ++sent_;
  StartWrite(&event_);
}

void WatchReactor::OnWriteDone(bool ok) {
  MutexLock lock(link_->mu);
  writing_ = false;
  if (!ok) {
    FinishLocked(absl::CancelledError("the watcher stopped reading"));
    return;
  }
  PumpLocked();
}

void WatchReactor::OnCancel() {
  MutexLock lock(link_->mu);
  FinishLocked(absl::CancelledError("the watcher went away"));
}

void WatchReactor::FinishLocked(const absl::Status& status) {
  if (finished_) return;
  finished_ = true;
  if (watcher_id_ != 0) store_->Unwatch(watcher_id_);
  auto what = [&] { return absl::StrCat("prefix '", prefix_, "'"); };
  auto client = [&] { return client_; };
  if (status.ok() || absl::IsCancelled(status)) {
    const uint64_t sent = sent_;
    LogCallSuccess(LogLevel::kDebug, "Watch", what, client,
                   [&] { return absl::StrCat(sent, " event(s) sent; ", status.message()); });
  } else {
    LogCallFailure("Watch", what, client, status);
  }
  Finish(ToGrpcStatus(status));
}

void WatchReactor::OnDone() {
  {
    MutexLock lock(link_->mu);
    link_->reactor = nullptr;
    if (watcher_id_ != 0) store_->Unwatch(watcher_id_);
  }
  delete this;
}

}  // namespace tensorbroker::daemon
