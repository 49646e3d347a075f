#include "daemon/store/wait_list.h"

#include "daemon/store/quota_ledger.h"

namespace tensorbroker::daemon {

absl::StatusOr<uint64_t> WaitList::Add(Waiter waiter) {
  if (absl::Status s = CountIn(&per_uid_, waiter.uid, most_per_uid_, "waiting Gets"); !s.ok()) {
    return s;
  }
  const uint64_t id = next_id_++;
  waiters_.emplace(id, std::move(waiter));
  return id;
}

bool WaitList::Remove(uint64_t id) {
  auto it = waiters_.find(id);
  if (it == waiters_.end()) return false;
  CountOff(&per_uid_, it->second.uid);
  waiters_.erase(it);
  return true;
}

size_t WaitList::RemoveIf(const std::function<bool(Waiter&)>& answered) {
  size_t removed = 0;
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (!answered(it->second)) {
      ++it;
      continue;
    }
    CountOff(&per_uid_, it->second.uid);
    it = waiters_.erase(it);
    ++removed;
  }
  return removed;
}

size_t WaitList::CountForUid(uint32_t uid) const {
  auto it = per_uid_.find(uid);
  return it == per_uid_.end() ? 0 : it->second;
}

}  // namespace tensorbroker::daemon
