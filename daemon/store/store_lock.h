// TensorStore's lock for the files that define its methods (tensor_store.cc and the files of one
// part each, tensor_store_replicas.cc): the store's mutex held for a call, and what the call
// deferred (callbacks of waiters, fetch requests) run once it is released. Private to the store.
#ifndef TENSORBROKER_DAEMON_STORE_LOCK_H_
#define TENSORBROKER_DAEMON_STORE_LOCK_H_

#include <functional>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "daemon/store/tensor_store.h"

namespace tensorbroker::daemon {

// Holds the store's mutex for a call, and runs what the call deferred once it is released.
class ABSL_SCOPED_LOCKABLE TensorStore::Locked {
 public:
  explicit Locked(const TensorStore* store) ABSL_EXCLUSIVE_LOCK_FUNCTION(store->mu_)
      : store_(const_cast<TensorStore*>(store)), lock_(store->mu_) {}
  ~Locked() ABSL_UNLOCK_FUNCTION() {
    std::vector<std::function<void()>> run = std::move(store_->deferred_);
    store_->deferred_.clear();
    lock_.unlock();
    for (auto& callback : run) callback();
  }
  Locked(const Locked&) = delete;
  Locked& operator=(const Locked&) = delete;

 private:
  TensorStore* store_;
  MutexLock lock_;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_STORE_LOCK_H_
