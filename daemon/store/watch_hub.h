// The event log behind Watch streams: one bounded ring of events shared by every watcher, and a
// cursor per watcher (no per-watcher copies). Memory is bounded by the ring's capacity whatever
// the watchers do; a watcher that falls behind the ring gets ONE kLost covering what it missed,
// then the events the ring still holds. Visibility (prefix, owner, readers) is decided at Take,
// for the watcher's principal, from what each entry recorded.
//
// Delivery is pulled: a transport calls Take until it returns nothing, which parks the watcher;
// the next Append (or Forget) that gives a parked watcher something hands out its `wake`
// callback once, and the transport Takes again. Wakes are never run by the hub: they are
// appended to the caller's vector, to run after the caller has released its own locks.
//
// Thread-safe (one Mutex of its own). Lock order: the store's mutex -> the hub's mutex;
// nothing is called back under the hub's mutex.
#ifndef TENSORBROKER_DAEMON_WATCH_HUB_H_
#define TENSORBROKER_DAEMON_WATCH_HUB_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "daemon/identity/principal.h"
#include "daemon/identity/principal_set.h"
#include "daemon/store/store_types.h"

namespace tensorbroker::daemon {

// An entry of the log, with what deciding visibility needs.
struct WatchEntry {
  StoreEvent event;
  uint32_t publisher_uid = 0;  // the version's owner (TensorObject spec.owner_uid)
  PrincipalSet readers;        // the version's readers
};

class WatchHub {
 public:
  using Wakes = std::vector<std::function<void()>>;

  // Keeps the last `log_capacity` entries (at least 1); older ones are forgotten.
  explicit WatchHub(size_t log_capacity);
  WatchHub(const WatchHub&) = delete;
  WatchHub& operator=(const WatchHub&) = delete;

  // Everything up to `through` is unknown to this log (instance start, adoption): a watcher
  // whose cursor is before it gets a kLost at its next Take. Monotonic (the max is kept).
  // Entries at or below it are dropped; parked watchers it puts behind are unparked and their
  // wakes appended to *wakes.
  void Forget(uint64_t through, Wakes* wakes);
  // Appends `entry`; its sequence must be above last_sequence() (the caller's counter
  // guarantees it). Returns false, changing nothing, for one that is not, for one at or below
  // the Forget horizon (unknown to the log by definition), and for a kLost. Appends to *wakes
  // the wake of each parked watcher the event matches (prefix, may read) and unparks it; a
  // parked watcher it does not match has its cursor moved past it (it is up to date, so a later
  // overflow must not report a kLost to it). The oldest entry is dropped when the log is full.
  bool Append(WatchEntry entry, Wakes* wakes);

  // A watcher of `prefix` for `principal`; returns its id (never 0, never reused). Its cursor
  // (the last sequence it has seen) is `after_version` if given, else "now": the highest of
  // `now_sequence` (the highest sequence the caller has assigned), last_sequence() and the
  // Forget horizon. An `after_version` above "now" comes from no history of this log (another
  // instance's, or made up): the watcher is then taken to have seen nothing (cursor 0), so it
  // gets a kLost for what was forgotten and the whole log, never a silent gap.
  // A new watcher is not parked: call Take. `wake` is handed out through Append's or Forget's
  // *wakes when the parked watcher has something, and by Shutdown.
  uint64_t Add(const Principal& principal, std::string prefix,
               std::optional<uint64_t> after_version, uint64_t now_sequence,
               std::function<void()> wake);
  // Up to `max` events after the watcher's cursor that it may see, in sequence order: prefix
  // match, and principal.admin || publisher_uid == principal.uid || readers.Allows(principal).
  // Entries it may not see are skipped (the cursor moves past them). If its cursor is below the
  // Forget horizon (evicted or forgotten entries), the first event is ONE kLost{lost_first =
  // cursor + 1, lost_last = sequence = horizon} and the cursor jumps to the horizon. When the
  // scan reaches the end of the log the watcher is parked (woken by the next Append that
  // matches it), even if events are returned. `max` 0 returns nothing and changes nothing.
  // NOT_FOUND for an unknown id; UNAVAILABLE after Shutdown. Never blocks on anything but the
  // hub's mutex.
  absl::StatusOr<std::vector<StoreEvent>> Take(uint64_t watcher_id, size_t max);
  // Ends the watcher; its wake is never handed out again (a copy handed out before may still be
  // run by whoever holds it: wakes must outlive, or tolerate, their watcher). Idempotent.
  void Remove(uint64_t watcher_id);
  // Take answers UNAVAILABLE from now on; appends every watcher's wake to *wakes (once: a
  // second call appends nothing). Append and Forget still keep the log, and wake no one.
  void Shutdown(Wakes* wakes);

  size_t watchers() const;
  uint64_t last_sequence() const;      // the highest appended (0 if none)
  uint64_t forgotten_through() const;  // the Forget horizon: evicted or forgotten (0 if none)
  size_t log_size() const;             // entries held (<= capacity)

 private:
  struct Watcher {
    Principal principal;
    std::string prefix;
    uint64_t cursor = 0;  // the last sequence it has seen or skipped
    bool parked = false;
    std::function<void()> wake;
  };

  static bool Visible(const Watcher& watcher, const WatchEntry& entry);
  void ForgetLocked(uint64_t through) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The first entry after `sequence` (binary search: entries are in sequence order).
  std::deque<WatchEntry>::const_iterator After(uint64_t sequence) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A parked watcher and the new entry: wake it if it matches, else move its cursor past.
  static void Offer(Watcher& watcher, const WatchEntry& entry, Wakes* wakes);

  const size_t capacity_;
  mutable Mutex mu_;
  std::deque<WatchEntry> log_ ABSL_GUARDED_BY(mu_);  // ascending sequences, all > forgotten_
  uint64_t forgotten_ ABSL_GUARDED_BY(mu_) = 0;      // the Forget horizon
  uint64_t last_sequence_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  std::map<uint64_t, Watcher> watchers_ ABSL_GUARDED_BY(mu_);
  std::set<uint64_t> parked_ ABSL_GUARDED_BY(mu_);  // ids of parked watchers: Append visits these
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_WATCH_HUB_H_
