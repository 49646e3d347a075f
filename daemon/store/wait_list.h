// The Gets waiting for a name to be published (TensorStore::GetOrWait): for each, who waits
// (session, uid), for what (name, newer than which version), and the callback that answers it,
// by waiter id; and how many each uid has waiting, against a most. Which waiter an event answers,
// and with what, is the store's to decide (RemoveIf): the list only keeps them.
//
// Not thread-safe: the TensorStore calls it only while holding its own lock. Callbacks are never
// run here: the store moves them out and runs them once its lock is released.
#ifndef TENSORBROKER_DAEMON_WAIT_LIST_H_
#define TENSORBROKER_DAEMON_WAIT_LIST_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace tensorbroker::daemon {

struct TensorGrant;  // tensor_store.h

// Answers a Get that waited (TensorStore::GetOrWait). Runs without the store's lock.
using GetCallback = std::function<void(absl::StatusOr<TensorGrant>)>;

class WaitList {
 public:
  struct Waiter {
    uint32_t uid = 0;  // the session's
    std::string session_id;
    std::string name;
    std::optional<uint64_t> after_version;
    GetCallback on_ready;
    // Waits only for the fetch of a peer's tensor (its own wait was none): a fetch that finds
    // nothing answers it NOT_FOUND (TensorStore::FailFetch).
    bool for_fetch = false;
  };

  // Each uid may have at most `most_per_uid` waiting at once.
  explicit WaitList(size_t most_per_uid) : most_per_uid_(most_per_uid) {}

  // Adds `waiter` and returns its id (never 0, never reused); RESOURCE_EXHAUSTED when its uid
  // has the most waiting already, changing nothing.
  absl::StatusOr<uint64_t> Add(Waiter waiter);
  // Forgets waiter `id`; false when there is none (answered, or cancelled already).
  bool Remove(uint64_t id);
  // Visits every waiter in id order; those for which `answered` returns true are forgotten
  // (`answered` takes their on_ready first). Returns how many.
  size_t RemoveIf(const std::function<bool(Waiter&)>& answered);

  size_t size() const { return waiters_.size(); }
  size_t CountForUid(uint32_t uid) const;

 private:
  const size_t most_per_uid_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, Waiter> waiters_;
  std::map<uint32_t, size_t> per_uid_;  // no zero entries
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_WAIT_LIST_H_
