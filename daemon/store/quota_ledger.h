// What each uid holds in the broker, against what it may hold: the bytes and tensors of its
// tensor objects (against its Quota), and its Read and Watch streams (against a per-uid most,
// whatever its number of connections). Counts only; no entry is kept for a uid holding nothing.
//
// Not thread-safe: the TensorStore calls it only while holding its own lock.
#ifndef TENSORBROKER_DAEMON_QUOTA_LEDGER_H_
#define TENSORBROKER_DAEMON_QUOTA_LEDGER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "daemon/identity/principal.h"
#include "daemon/identity/quota.h"
#include "daemon/store/store_types.h"

namespace tensorbroker::daemon {

// Counts one more for `uid` in `counts` when it has fewer than `most`; else RESOURCE_EXHAUSTED
// naming `what` ("watches: uid 1000 has 1024 already ..."), changing nothing.
absl::Status CountIn(std::map<uint32_t, size_t>* counts, uint32_t uid, size_t most,
                     const char* what);
// Counts one off for `uid` (an entry that reaches 0 goes); nothing for a uid not counted.
void CountOff(std::map<uint32_t, size_t>* counts, uint32_t uid);

class QuotaLedger {
 public:
  struct Usage {
    uint64_t bytes = 0;
    uint64_t tensors = 0;
  };
  // What kind of stream a uid holds, and the most of each it may hold at once.
  enum class Stream { kRead, kWatch };
  struct StreamLimits {
    size_t reads = 0;
    size_t watches = 0;
  };

  // `quota_for` null: no quotas (CheckRoom always OK, Users reports 0s).
  QuotaLedger(std::function<Quota(uint32_t uid)> quota_for, StreamLimits limits);

  // Whether `uid` may take a tensor `name` of `nbytes` more: RESOURCE_EXHAUSTED past its bytes
  // (quota-bytes) or its tensor count (quota-tensors).
  absl::Status CheckRoom(uint32_t uid, const std::string& name, uint64_t nbytes) const;
  // A tensor object of `nbytes` now counts for `uid` / no longer does (it was charged).
  void Charge(uint32_t uid, uint64_t nbytes);
  void Refund(uint32_t uid, uint64_t nbytes);
  // What `uid` holds (0s when nothing).
  Usage UsageOf(uint32_t uid) const;
  // Stats' rows: every uid holding something for an administrator, else the caller's alone
  // (even when it holds nothing). `user` is left empty.
  std::vector<StoreStats::User> Users(const Principal& caller) const;

  // Whether `uid` may open one more stream of `kind` now: RESOURCE_EXHAUSTED when it has the
  // most of that kind already ("reads in progress: ...", "watches: ...").
  absl::Status CheckStream(Stream kind, uint32_t uid) const;
  // Stream `id` of `kind` (a Read's lease id, a Watch's watcher id; new) is open for `uid`, which
  // CheckStream allowed (the caller's lock held in between).
  void OpenStream(Stream kind, uint64_t id, uint32_t uid);
  // Ends stream `id` of `kind`; nothing for an unknown one.
  void CloseStream(Stream kind, uint64_t id);

 private:
  struct Streams {
    size_t most = 0;
    const char* what = "";
    std::map<uint64_t, uint32_t> uid_of;  // stream id -> uid
    std::map<uint32_t, size_t> per_uid;   // no zero entries
  };
  Streams& StreamsOf(Stream kind) { return kind == Stream::kRead ? reads_ : watches_; }
  const Streams& StreamsOf(Stream kind) const { return kind == Stream::kRead ? reads_ : watches_; }
  StoreStats::User Row(uint32_t uid, const Usage& usage) const;

  const std::function<Quota(uint32_t uid)> quota_for_;
  std::map<uint32_t, Usage> usage_;  // no empty entries
  Streams reads_;
  Streams watches_;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_QUOTA_LEDGER_H_
