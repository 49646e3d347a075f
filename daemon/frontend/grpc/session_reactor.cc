#include "daemon/frontend/grpc/session_reactor.h"

#include <utility>

#include "absl/strings/escaping.h"
#include "common/mutex.h"
#include "daemon/base/log.h"

namespace tensorbroker::daemon {

SessionReactor::SessionReactor(TensorStore* store, SessionRegistry* registry, std::string client,
                               const absl::StatusOr<Principal>& principal)
    : store_(store), registry_(registry), client_(std::move(client)) {
  registry_->Add(this);
  if (!principal.ok()) {
    session_closed_ = true;
    Log(LogLevel::kWarning, "Session ", client_, ": ", principal.status().message());
    FinishWith(grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                            std::string(principal.status().message())));
    return;
  }
  session_id_ = store_->OpenSession(*principal, 0, "", this);
  Log(LogLevel::kInfo, "client connected: ", client_);
  {
    MutexLock lock(mu_);
    v1::SessionEvent opened;
    opened.mutable_opened()->set_session_id(session_id_);
    QueueLocked(std::move(opened));
  }
  StartRead(&request_);
  if (registry_->closed())
    FinishWith(grpc::Status(grpc::StatusCode::UNAVAILABLE, "tensorbrokerd is shutting down"));
}

void SessionReactor::OnReadDone(bool ok) {
  if (!ok) {
    // The client half-closed or went away: its session ends now.
    CloseSession();
    FinishWith(grpc::Status::OK);
    return;
  }
  if (request_.has_hello()) {
    store_->UpdateSessionHello(session_id_, request_.hello().pid(),
                               request_.hello().client_name().substr(0, 128));
    Log(LogLevel::kDebug, "client ", client_, " says it is pid ", request_.hello().pid(), " '",
        absl::CHexEscape(request_.hello().client_name().substr(0, 128)), "'");
  }
  StartRead(&request_);
}

void SessionReactor::QueueLocked(v1::SessionEvent event) {
  if (finished_) return;
  writes_.push_back(std::move(event));
  if (writes_.size() == 1) StartWrite(&writes_.front());
}

void SessionReactor::OnWriteDone(bool ok) {
  MutexLock lock(mu_);
  if (!writes_.empty()) writes_.pop_front();
  if (!ok) {
    writes_.clear();
    return;
  }
  if (!writes_.empty() && !finished_) StartWrite(&writes_.front());
}

void SessionReactor::OnSegmentRemoved(const std::string& segment) {
  MutexLock lock(mu_);
  v1::SessionEvent event;
  event.mutable_segment_removed()->set_segment(segment);
  QueueLocked(std::move(event));
}

void SessionReactor::OnCancel() { CloseSession(); }

void SessionReactor::CloseSession() {
  {
    MutexLock lock(mu_);
    if (session_closed_) return;
    session_closed_ = true;
  }
  const TensorStore::SessionCleanup cleanup = store_->CloseSession(session_id_);
  Log(LogLevel::kInfo, "client disconnected: ", client_,
      " leases_released=", cleanup.leases_released, " pending_aborted=", cleanup.pending_aborted);
}

void SessionReactor::FinishWith(const grpc::Status& status) {
  MutexLock lock(mu_);
  if (finished_) return;
  finished_ = true;
  Finish(status);
}

void SessionReactor::OnDone() {
  CloseSession();
  registry_->Remove(this);
  delete this;
}

void SessionRegistry::Add(SessionReactor* reactor) {
  MutexLock lock(mu_);
  reactors_.insert(reactor);
}

void SessionRegistry::Remove(SessionReactor* reactor) {
  MutexLock lock(mu_);
  reactors_.erase(reactor);
}

bool SessionRegistry::closed() {
  MutexLock lock(mu_);
  return closed_;
}

void SessionRegistry::FinishAll(const grpc::Status& status) {
  MutexLock lock(mu_);
  closed_ = true;
  // OnDone (which takes mu_ via Remove) runs on a gRPC thread after Finish completes, never
  // inline, so holding mu_ here cannot deadlock.
  for (SessionReactor* reactor : reactors_) reactor->FinishWith(status);
}

}  // namespace tensorbroker::daemon
