// CancelScope: ties one Get on the wire to its GetCancellation (client.h). While the scope
// lives, the token's Cancel() runs the armed hook (which tells the daemon to drop the wait);
// when it ends, the hook is gone, so Cancel() never touches a finished call.
// Owned by the Get's thread, on its stack; Arm and the destructor may race Cancel() on other
// threads (the token's mutex orders them).
#ifndef TENSORBROKER_CLIENT_SRC_CANCEL_SCOPE_H_
#define TENSORBROKER_CLIENT_SRC_CANCEL_SCOPE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "tensorbroker/client.h"

namespace tensorbroker::client_internal {

class CancelScope {
 public:
  // `token` may be null: then nothing is ever cancelled.
  explicit CancelScope(GetCancellation* token) : token_(token) {}
  ~CancelScope();
  CancelScope(const CancelScope&) = delete;
  CancelScope& operator=(const CancelScope&) = delete;

  bool cancelled() const { return token_ != nullptr && token_->cancelled(); }
  // CANCELLED naming the Get of `name` if the token was cancelled, else OK (no allocation).
  absl::Status Check(const std::string& name) const;
  // Runs `on_cancel` when the token is cancelled: at once if it was, else from Cancel(), at
  // most once, and never after this scope ends. One hook per scope.
  void Arm(std::function<void()> on_cancel);

 private:
  GetCancellation* const token_;
  std::optional<uint64_t> hook_;
};

}  // namespace tensorbroker::client_internal

#endif  // TENSORBROKER_CLIENT_SRC_CANCEL_SCOPE_H_
