#include "client/src/fork_guard.h"

#include <pthread.h>

#include <atomic>
#include <mutex>

namespace tensorbroker::client_internal {
namespace {

std::atomic<bool> connected{false};
std::atomic<bool> forked_child{false};

// Runs in the child right after fork(), which copied `connected`: only atomics here.
void AfterForkInChild() {
  if (connected.load(std::memory_order_relaxed)) forked_child.store(true);
}

}  // namespace

void NoteConnecting() {
  static std::once_flag registered;
  std::call_once(registered, [] { (void)::pthread_atfork(nullptr, nullptr, AfterForkInChild); });
  connected.store(true);
}

bool InForkedChild() { return forked_child.load(); }

absl::Status ConnectableHere() {
  if (!InForkedChild()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      "connect: this process is a fork() of one that had connected to tensorbrokerd, and gRPC "
      "does not survive fork() (using it here would hang the parent's calls); connect in a "
      "process started with exec instead (Python multiprocessing: the \"spawn\" or "
      "\"forkserver\" start method; torch DataLoader: multiprocessing_context=\"spawn\"), or fork "
      "before the parent's first connect");
}

absl::Status UsableHere() {
  if (!InForkedChild()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      "this client belongs to the process that forked this one: a client does not cross "
      "fork(), and this process may not connect either (gRPC does not survive fork()); see "
      "connect's error for what to do instead");
}

}  // namespace tensorbroker::client_internal
