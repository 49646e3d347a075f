#include "client/src/cancel_scope.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace tensorbroker {

void GetCancellation::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  if (cancelled_) return;
  cancelled_ = true;
  // Under the lock: a scope that ends meanwhile waits, so no hook outlives its call.
  for (auto& [id, hook] : hooks_) hook();
  hooks_.clear();
}

bool GetCancellation::cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

namespace client_internal {

CancelScope::~CancelScope() {
  if (token_ == nullptr || !hook_.has_value()) return;
  std::lock_guard<std::mutex> lock(token_->mu_);
  token_->hooks_.erase(*hook_);
}

absl::Status CancelScope::Check(const std::string& name) const {
  if (!cancelled()) return absl::OkStatus();
  return absl::CancelledError(absl::StrCat("get '", name, "': cancelled (GetCancellation)"));
}

void CancelScope::Arm(std::function<void()> on_cancel) {
  if (token_ == nullptr) return;
  std::unique_lock<std::mutex> lock(token_->mu_);
  if (token_->cancelled_) {
    lock.unlock();
    on_cancel();
    return;
  }
  hook_ = token_->next_hook_++;
  token_->hooks_.emplace(*hook_, std::move(on_cancel));
}

}  // namespace client_internal
}  // namespace tensorbroker
