// WatchHub: ordering, prefix and visibility filters, the bounded log and its single kLost,
// resuming, parking and wakes, errors and shutdown, and many threads at once.
#include "daemon/store/watch_hub.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tensorbroker::daemon {
namespace {

using Kind = StoreEvent::Kind;

constexpr uint32_t kOwner = 1000;

Principal User(uint32_t uid, std::vector<uint32_t> gids = {}, bool admin = false) {
  if (gids.empty()) gids.push_back(uid);
  return Principal{uid, std::move(gids), admin, {}};
}

PrincipalSet Readers(const std::vector<std::string>& entries) {
  auto set = PrincipalSet::Parse(entries, "readers");
  EXPECT_TRUE(set.ok()) << set.status();
  return *set;
}

// A publication of `name` at `sequence` by `owner`, readable by `readers` (by default the owner
// only, as the store records it).
WatchEntry Published(uint64_t sequence, std::string name, uint32_t owner = kOwner,
                     std::optional<PrincipalSet> readers = std::nullopt) {
  WatchEntry entry;
  entry.event.kind = Kind::kPublished;
  entry.event.sequence = sequence;
  entry.event.name = std::move(name);
  entry.event.version = sequence;
  entry.event.info.name = entry.event.name;
  entry.event.info.version = sequence;
  entry.event.info.owner_uid = owner;
  entry.publisher_uid = owner;
  entry.readers = readers.has_value() ? *readers : PrincipalSet().WithUid(owner);
  return entry;
}

void RunAll(WatchHub::Wakes& wakes) {
  for (auto& wake : wakes) wake();
  wakes.clear();
}

// Appends and runs the wakes it hands out, as the store does after releasing its lock.
void Append(WatchHub& hub, WatchEntry entry) {
  WatchHub::Wakes wakes;
  ASSERT_TRUE(hub.Append(std::move(entry), &wakes));
  RunAll(wakes);
}

// Appends publications of prefix+i for i in [first, last].
void AppendRange(WatchHub& hub, uint64_t first, uint64_t last, const std::string& prefix = "a/") {
  for (uint64_t s = first; s <= last; ++s) Append(hub, Published(s, absl::StrCat(prefix, s)));
}

std::vector<StoreEvent> TakeOk(WatchHub& hub, uint64_t id, size_t max = 1000) {
  auto events = hub.Take(id, max);
  EXPECT_TRUE(events.ok()) << events.status();
  return events.ok() ? *events : std::vector<StoreEvent>{};
}

std::vector<uint64_t> Sequences(const std::vector<StoreEvent>& events) {
  std::vector<uint64_t> sequences;
  for (const auto& event : events) sequences.push_back(event.sequence);
  return sequences;
}

std::vector<uint64_t> Iota(uint64_t first, uint64_t last) {
  std::vector<uint64_t> values;
  for (uint64_t v = first; v <= last; ++v) values.push_back(v);
  return values;
}

void ExpectLost(const StoreEvent& event, uint64_t first, uint64_t last) {
  EXPECT_EQ(event.kind, Kind::kLost);
  EXPECT_EQ(event.lost_first, first);
  EXPECT_EQ(event.lost_last, last);
  EXPECT_EQ(event.sequence, last);
  EXPECT_TRUE(event.name.empty());
}

// A wake that counts its calls.
struct WakeCounter {
  std::shared_ptr<int> calls = std::make_shared<int>(0);
  std::function<void()> wake() {
    return [calls = calls] { ++*calls; };
  }
  int count() const { return *calls; }
};

TEST(WatchHub, DeliversEventsInOrderUnderThePrefix) {
  WatchHub hub(16);
  const uint64_t id = hub.Add(User(kOwner), "cam/", std::nullopt, 0, [] {});
  EXPECT_NE(id, 0u);
  Append(hub, Published(1, "cam/a"));
  Append(hub, Published(2, "other/x"));
  WatchEntry replaced = Published(3, "cam/a");
  replaced.event.kind = Kind::kReplaced;
  replaced.event.previous_version = 1;
  Append(hub, replaced);
  Append(hub, Published(4, "camera"));
  WatchEntry deleted = Published(6, "cam/a");
  deleted.event.kind = Kind::kDeleted;
  deleted.event.version = 3;
  Append(hub, deleted);

  const auto events = TakeOk(hub, id);
  ASSERT_EQ(Sequences(events), (std::vector<uint64_t>{1, 3, 6}));
  EXPECT_EQ(events[0].kind, Kind::kPublished);
  EXPECT_EQ(events[0].name, "cam/a");
  EXPECT_EQ(events[0].version, 1u);
  EXPECT_EQ(events[0].info.owner_uid, kOwner);
  EXPECT_EQ(events[1].kind, Kind::kReplaced);
  EXPECT_EQ(events[1].version, 3u);
  EXPECT_EQ(events[1].previous_version, 1u);
  EXPECT_EQ(events[2].kind, Kind::kDeleted);
  EXPECT_EQ(events[2].version, 3u);
  EXPECT_TRUE(TakeOk(hub, id).empty());
  EXPECT_EQ(hub.last_sequence(), 6u);
}

TEST(WatchHub, EmptyPrefixWatchesEveryName) {
  WatchHub hub(16);
  const uint64_t id = hub.Add(User(kOwner), "", std::nullopt, 0, [] {});
  Append(hub, Published(1, "x"));
  Append(hub, Published(2, "y/z"));
  EXPECT_EQ(Sequences(TakeOk(hub, id)), (std::vector<uint64_t>{1, 2}));
}

TEST(WatchHub, VisibilityFollowsOwnerReadersAndAdmin) {
  WatchHub hub(16);
  const uint64_t owner = hub.Add(User(kOwner), "", std::nullopt, 0, [] {});
  const uint64_t reader_uid = hub.Add(User(1001), "", std::nullopt, 0, [] {});
  const uint64_t reader_gid = hub.Add(User(1002, {1002, 50}), "", std::nullopt, 0, [] {});
  const uint64_t stranger = hub.Add(User(1003), "", std::nullopt, 0, [] {});
  const uint64_t admin = hub.Add(User(1004, {1004}, true), "", std::nullopt, 0, [] {});
  Append(hub, Published(1, "private"));
  Append(hub, Published(2, "to-uid", kOwner, Readers({"uid:1001", "uid:1000"})));
  Append(hub, Published(3, "to-gid", kOwner, Readers({"gid:50", "uid:1000"})));
  Append(hub, Published(4, "public", kOwner, PrincipalSet::Anyone()));
  // The publisher sees its own even when the readers omit it.
  Append(hub, Published(5, "own", 1003, Readers({"uid:1001"})));

  EXPECT_EQ(Sequences(TakeOk(hub, owner)), (std::vector<uint64_t>{1, 2, 3, 4}));
  EXPECT_EQ(Sequences(TakeOk(hub, reader_uid)), (std::vector<uint64_t>{2, 4, 5}));
  EXPECT_EQ(Sequences(TakeOk(hub, reader_gid)), (std::vector<uint64_t>{3, 4}));
  EXPECT_EQ(Sequences(TakeOk(hub, stranger)), (std::vector<uint64_t>{4, 5}));
  EXPECT_EQ(Sequences(TakeOk(hub, admin)), (std::vector<uint64_t>{1, 2, 3, 4, 5}));
  // Hidden events are skipped, not reported lost.
  EXPECT_TRUE(TakeOk(hub, stranger).empty());
}

TEST(WatchHub, TakeReturnsAtMostMax) {
  WatchHub hub(16);
  WakeCounter wakes;
  const uint64_t id = hub.Add(User(kOwner), "a/", std::nullopt, 0, wakes.wake());
  AppendRange(hub, 1, 5);
  EXPECT_EQ(Sequences(TakeOk(hub, id, 2)), (std::vector<uint64_t>{1, 2}));
  // Not parked (more is left): no wake for the next event.
  AppendRange(hub, 6, 6);
  EXPECT_EQ(wakes.count(), 0);
  EXPECT_EQ(Sequences(TakeOk(hub, id, 3)), (std::vector<uint64_t>{3, 4, 5}));
  // max 0: nothing, and nothing changes.
  EXPECT_TRUE(TakeOk(hub, id, 0).empty());
  EXPECT_EQ(Sequences(TakeOk(hub, id, 3)), (std::vector<uint64_t>{6}));
}

TEST(WatchHub, LogIsBoundedByItsCapacity) {
  WatchHub hub(8);
  // Watchers that never take, whatever their number, keep nothing alive.
  for (int i = 0; i < 10; ++i) hub.Add(User(kOwner), "a/", 0, 0, [] {});
  AppendRange(hub, 1, 1000);
  EXPECT_EQ(hub.log_size(), 8u);
  EXPECT_EQ(hub.forgotten_through(), 992u);
  EXPECT_EQ(hub.last_sequence(), 1000u);
  EXPECT_EQ(hub.watchers(), 10u);
  // A capacity of 0 keeps one entry.
  WatchHub tiny(0);
  AppendRange(tiny, 1, 3);
  EXPECT_EQ(tiny.log_size(), 1u);
  EXPECT_EQ(tiny.forgotten_through(), 2u);
}

TEST(WatchHub, StalledWatcherGetsExactlyOneLostThenTheRest) {
  constexpr size_t kCapacity = 8;
  WatchHub hub(kCapacity);
  WakeCounter stalled_wakes;
  const uint64_t stalled = hub.Add(User(kOwner), "a/", std::nullopt, 0, stalled_wakes.wake());
  const uint64_t keeping_up = hub.Add(User(kOwner), "a/", std::nullopt, 0, [] {});
  EXPECT_TRUE(TakeOk(hub, stalled).empty());  // parked
  std::vector<StoreEvent> seen;
  for (uint64_t s = 1; s <= 10 * kCapacity; ++s) {
    AppendRange(hub, s, s);
    for (auto& event : TakeOk(hub, keeping_up)) seen.push_back(std::move(event));
  }
  EXPECT_EQ(Sequences(seen), Iota(1, 80));
  for (const auto& event : seen) EXPECT_EQ(event.kind, Kind::kPublished);
  // Woken once, by the first event; it did not take, so no further wakes.
  EXPECT_EQ(stalled_wakes.count(), 1);

  // One kLost for 1..72 (evicted), then 73..80, contiguous.
  auto lost = TakeOk(hub, stalled, 1);
  ASSERT_EQ(lost.size(), 1u);
  ExpectLost(lost[0], 1, 72);
  auto rest = TakeOk(hub, stalled, 3);
  EXPECT_EQ(Sequences(rest), (std::vector<uint64_t>{73, 74, 75}));
  rest = TakeOk(hub, stalled);
  EXPECT_EQ(Sequences(rest), (std::vector<uint64_t>{76, 77, 78, 79, 80}));
  for (const auto& event : rest) EXPECT_EQ(event.kind, Kind::kPublished);
  EXPECT_TRUE(TakeOk(hub, stalled).empty());
}

TEST(WatchHub, LostAndEventsComeInOneTake) {
  WatchHub hub(4);
  const uint64_t id = hub.Add(User(kOwner), "a/", std::nullopt, 0, [] {});
  AppendRange(hub, 1, 10);
  const auto events = TakeOk(hub, id);
  ASSERT_EQ(events.size(), 5u);
  ExpectLost(events[0], 1, 6);
  EXPECT_EQ(Sequences(events), (std::vector<uint64_t>{6, 7, 8, 9, 10}));
}

TEST(WatchHub, ResumeInsideTheLogReplaysWithoutLost) {
  WatchHub hub(8);
  AppendRange(hub, 1, 20);  // the log holds 13..20; 1..12 are forgotten
  const uint64_t after_15 = hub.Add(User(kOwner), "a/", 15, 20, [] {});
  EXPECT_EQ(Sequences(TakeOk(hub, after_15)), (std::vector<uint64_t>{16, 17, 18, 19, 20}));
  // The horizon itself was seen: nothing is missing.
  const uint64_t after_12 = hub.Add(User(kOwner), "a/", 12, 20, [] {});
  EXPECT_EQ(Sequences(TakeOk(hub, after_12)), Iota(13, 20));
}

TEST(WatchHub, ResumeBeforeTheLogGetsOneLost) {
  WatchHub hub(8);
  AppendRange(hub, 1, 20);
  const uint64_t after_11 = hub.Add(User(kOwner), "a/", 11, 20, [] {});
  auto events = TakeOk(hub, after_11);
  ASSERT_EQ(events.size(), 9u);
  ExpectLost(events[0], 12, 12);
  const auto sequences = Sequences(events);
  EXPECT_EQ(std::vector<uint64_t>(sequences.begin() + 1, sequences.end()), Iota(13, 20));
  const uint64_t after_0 = hub.Add(User(kOwner), "a/", 0, 20, [] {});
  events = TakeOk(hub, after_0);
  ASSERT_EQ(events.size(), 9u);
  ExpectLost(events[0], 1, 12);
  for (size_t i = 1; i < events.size(); ++i) EXPECT_EQ(events[i].kind, Kind::kPublished);
}

TEST(WatchHub, ResumeAtOrAfterTheLastSequenceWaits) {
  WatchHub hub(8);
  AppendRange(hub, 1, 20);
  WakeCounter at_last_wakes, ahead_wakes;
  const uint64_t at_last = hub.Add(User(kOwner), "a/", 20, 20, at_last_wakes.wake());
  // The store's counter may be past the log (numbers that made no event).
  const uint64_t ahead = hub.Add(User(kOwner), "a/", 25, 25, ahead_wakes.wake());
  EXPECT_TRUE(TakeOk(hub, at_last).empty());
  EXPECT_TRUE(TakeOk(hub, ahead).empty());
  AppendRange(hub, 26, 26);
  EXPECT_EQ(at_last_wakes.count(), 1);
  EXPECT_EQ(ahead_wakes.count(), 1);
  EXPECT_EQ(Sequences(TakeOk(hub, at_last)), (std::vector<uint64_t>{26}));
  EXPECT_EQ(Sequences(TakeOk(hub, ahead)), (std::vector<uint64_t>{26}));
}

TEST(WatchHub, ResumeFromBeyondNowIsTreatedAsSeeingNothing) {
  // An after_version this log never reached comes from another history: the watcher is told
  // what was forgotten and given the whole log, never a silent gap.
  WatchHub hub(8);
  AppendRange(hub, 1, 20);
  const uint64_t id = hub.Add(User(kOwner), "a/", 1000, 20, [] {});
  const auto events = TakeOk(hub, id);
  ASSERT_EQ(events.size(), 9u);
  ExpectLost(events[0], 1, 12);
  EXPECT_EQ(events[1].sequence, 13u);
  // With nothing forgotten, simply the whole log.
  WatchHub fresh(8);
  AppendRange(fresh, 1, 3);
  const uint64_t fresh_id = fresh.Add(User(kOwner), "a/", 1000, 3, [] {});
  EXPECT_EQ(Sequences(TakeOk(fresh, fresh_id)), (std::vector<uint64_t>{1, 2, 3}));
}

TEST(WatchHub, ForgetSetsAHorizonForResumes) {
  WatchHub hub(8);
  WatchHub::Wakes wakes;
  hub.Forget(1000, &wakes);
  hub.Forget(500, &wakes);  // monotonic
  EXPECT_TRUE(wakes.empty());
  EXPECT_EQ(hub.forgotten_through(), 1000u);
  const uint64_t before = hub.Add(User(kOwner), "a/", 500, 1000, [] {});
  const uint64_t at = hub.Add(User(kOwner), "a/", 1000, 1000, [] {});
  // "From now" is never behind the horizon, whatever the caller's counter says.
  const uint64_t from_now = hub.Add(User(kOwner), "a/", std::nullopt, 0, [] {});
  auto events = TakeOk(hub, before);
  ASSERT_EQ(events.size(), 1u);
  ExpectLost(events[0], 501, 1000);
  EXPECT_TRUE(TakeOk(hub, at).empty());
  EXPECT_TRUE(TakeOk(hub, from_now).empty());
  // Entries at or below the horizon are unknown to the log by definition.
  EXPECT_FALSE(hub.Append(Published(1000, "a/x"), &wakes));
  EXPECT_TRUE(hub.Append(Published(1001, "a/x"), &wakes));
  EXPECT_EQ(wakes.size(), 3u);
  for (uint64_t id : {before, at, from_now}) {
    EXPECT_EQ(Sequences(TakeOk(hub, id)), (std::vector<uint64_t>{1001}));
  }
}

TEST(WatchHub, ForgetWakesParkedWatchersItPutsBehind) {
  WatchHub hub(8);
  AppendRange(hub, 1, 5);
  WakeCounter behind_wakes, ahead_wakes;
  const uint64_t behind = hub.Add(User(kOwner), "a/", std::nullopt, 5, behind_wakes.wake());
  const uint64_t ahead = hub.Add(User(kOwner), "a/", 12, 12, ahead_wakes.wake());
  EXPECT_TRUE(TakeOk(hub, behind).empty());
  EXPECT_TRUE(TakeOk(hub, ahead).empty());
  WatchHub::Wakes wakes;
  hub.Forget(10, &wakes);
  RunAll(wakes);
  EXPECT_EQ(hub.log_size(), 0u);
  EXPECT_EQ(behind_wakes.count(), 1);
  EXPECT_EQ(ahead_wakes.count(), 0);
  // An event it does not match must not carry it past its kLost.
  Append(hub, Published(13, "b/x"));
  auto events = TakeOk(hub, behind);
  ASSERT_EQ(events.size(), 1u);
  ExpectLost(events[0], 6, 10);
  EXPECT_TRUE(TakeOk(hub, ahead).empty());
}

TEST(WatchHub, ParkedWatcherIsWokenOncePerIdlePeriod) {
  WatchHub hub(64);
  WakeCounter wakes;
  const uint64_t id = hub.Add(User(kOwner), "a/", std::nullopt, 0, wakes.wake());
  EXPECT_TRUE(TakeOk(hub, id).empty());
  AppendRange(hub, 1, 5);
  EXPECT_EQ(wakes.count(), 1);
  EXPECT_EQ(Sequences(TakeOk(hub, id)), Iota(1, 5));  // reaches the end: parked again
  AppendRange(hub, 6, 6);
  EXPECT_EQ(wakes.count(), 2);
  AppendRange(hub, 7, 9);
  EXPECT_EQ(wakes.count(), 2);
  EXPECT_EQ(Sequences(TakeOk(hub, id)), Iota(6, 9));
  EXPECT_TRUE(TakeOk(hub, id).empty());
  EXPECT_EQ(wakes.count(), 2);
}

TEST(WatchHub, ParkedWatcherIsWokenOnlyByEventsItMaySee) {
  WatchHub hub(64);
  WakeCounter wakes;
  const uint64_t id = hub.Add(User(kOwner), "a/", std::nullopt, 0, wakes.wake());
  EXPECT_TRUE(TakeOk(hub, id).empty());
  Append(hub, Published(1, "b/x"));        // another prefix
  Append(hub, Published(2, "a/x", 2000));  // another owner, not a reader
  EXPECT_EQ(wakes.count(), 0);
  Append(hub, Published(3, "a/y"));
  EXPECT_EQ(wakes.count(), 1);
  EXPECT_EQ(Sequences(TakeOk(hub, id)), (std::vector<uint64_t>{3}));
}

TEST(WatchHub, ParkedWatcherThatNeverMatchesGetsNoWakeAndNoFalseLost) {
  WatchHub hub(4);
  WakeCounter wakes;
  const uint64_t id = hub.Add(User(kOwner), "never/", std::nullopt, 0, wakes.wake());
  EXPECT_TRUE(TakeOk(hub, id).empty());
  AppendRange(hub, 1, 100);  // the log overflows many times over
  EXPECT_EQ(wakes.count(), 0);
  EXPECT_TRUE(TakeOk(hub, id).empty());
  Append(hub, Published(101, "never/x"));
  EXPECT_EQ(wakes.count(), 1);
  const auto events = TakeOk(hub, id);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, Kind::kPublished);
  EXPECT_EQ(events[0].sequence, 101u);
}

TEST(WatchHub, AppendRefusesWhatBreaksTheOrder) {
  WatchHub hub(8);
  WakeCounter wakes;
  const uint64_t id = hub.Add(User(kOwner), "", std::nullopt, 0, wakes.wake());
  EXPECT_TRUE(TakeOk(hub, id).empty());
  WatchHub::Wakes out;
  EXPECT_TRUE(hub.Append(Published(5, "x"), &out));
  EXPECT_FALSE(hub.Append(Published(5, "y"), &out));
  EXPECT_FALSE(hub.Append(Published(3, "y"), &out));
  WatchEntry lost = Published(9, "");
  lost.event.kind = Kind::kLost;
  EXPECT_FALSE(hub.Append(lost, &out));
  EXPECT_EQ(out.size(), 1u);
  EXPECT_EQ(hub.last_sequence(), 5u);
  EXPECT_EQ(hub.log_size(), 1u);
  EXPECT_EQ(Sequences(TakeOk(hub, id)), (std::vector<uint64_t>{5}));
}

TEST(WatchHub, UnknownIdsRemoveAndCount) {
  WatchHub hub(8);
  EXPECT_EQ(hub.Take(1, 10).status(), absl::NotFoundError("watcher 1 is not watching"));
  WakeCounter wakes;
  const uint64_t a = hub.Add(User(kOwner), "a/", std::nullopt, 0, wakes.wake());
  const uint64_t b = hub.Add(User(kOwner), "a/", std::nullopt, 0, [] {});
  EXPECT_NE(a, 0u);
  EXPECT_NE(a, b);
  EXPECT_EQ(hub.watchers(), 2u);
  EXPECT_TRUE(TakeOk(hub, a).empty());
  hub.Remove(a);
  hub.Remove(a);
  hub.Remove(12345);
  EXPECT_EQ(hub.watchers(), 1u);
  EXPECT_EQ(hub.Take(a, 10).status().code(), absl::StatusCode::kNotFound);
  AppendRange(hub, 1, 1);  // a was parked: no wake after Remove
  EXPECT_EQ(wakes.count(), 0);
  // Ids are never reused.
  EXPECT_GT(hub.Add(User(kOwner), "a/", std::nullopt, 0, [] {}), b);
}

TEST(WatchHub, ShutdownWakesEveryWatcherAndTakeAnswersUnavailable) {
  WatchHub hub(8);
  WakeCounter parked, busy;
  const uint64_t parked_id = hub.Add(User(kOwner), "a/", std::nullopt, 0, parked.wake());
  const uint64_t busy_id = hub.Add(User(kOwner), "a/", 0, 0, busy.wake());
  EXPECT_TRUE(TakeOk(hub, parked_id).empty());
  AppendRange(hub, 1, 3);
  EXPECT_EQ(parked.count(), 1);
  EXPECT_EQ(Sequences(TakeOk(hub, parked_id)), Iota(1, 3));
  WatchHub::Wakes wakes;
  hub.Shutdown(&wakes);
  EXPECT_EQ(wakes.size(), 2u);
  RunAll(wakes);
  EXPECT_EQ(parked.count(), 2);
  EXPECT_EQ(busy.count(), 1);
  EXPECT_EQ(hub.Take(parked_id, 10).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(hub.Take(busy_id, 10).status().code(), absl::StatusCode::kUnavailable);
  // Once: later calls wake no one.
  hub.Shutdown(&wakes);
  EXPECT_TRUE(hub.Append(Published(4, "a/4"), &wakes));
  hub.Forget(100, &wakes);
  EXPECT_TRUE(wakes.empty());
  EXPECT_EQ(hub.watchers(), 2u);
  hub.Remove(parked_id);
  EXPECT_EQ(hub.watchers(), 1u);
}

// One thread appends, four take in loops and wait for their wake on a condition variable.
// Every event is visible except each 7th (another owner's); each taker checks that what it sees
// covers every visible sequence exactly once, either as an event or inside a kLost range.
struct StreamCheck {
  uint64_t events = 0;
  uint64_t lost = 0;
  bool ok = true;
  std::string failure;
};

constexpr uint64_t kStreamEvents = 100000;

bool VisibleInStream(uint64_t sequence) { return sequence % 7 != 0; }

uint64_t NextVisible(uint64_t after) {
  uint64_t next = after + 1;
  while (!VisibleInStream(next)) ++next;
  return next;
}

class Taker {
 public:
  explicit Taker(WatchHub& hub) : hub_(hub) {
    id_ = hub.Add(User(kOwner), "s/", std::nullopt, 0, [this] { Wake(); });
  }
  void Wake() {
    std::lock_guard<std::mutex> lock(mu_);
    woken_ = true;
    cv_.notify_one();
  }
  // Until the last sequence is seen, or a failure, or a minute has passed.
  StreamCheck Run() {
    StreamCheck check;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    uint64_t position = 0;
    while (position < kStreamEvents && check.ok) {
      if (std::chrono::steady_clock::now() > give_up) return Fail(check, "timed out");
      auto events = hub_.Take(id_, 64);
      if (!events.ok()) return Fail(check, events.status().ToString());
      if (events->empty()) {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait_for(lock, std::chrono::seconds(1), [this] { return woken_; });
        woken_ = false;
        continue;
      }
      for (const auto& event : *events) Check(event, position, check);
    }
    return check;
  }

 private:
  static StreamCheck& Fail(StreamCheck& check, std::string why) {
    if (check.ok) check.failure = std::move(why);
    check.ok = false;
    return check;
  }
  static void Check(const StoreEvent& event, uint64_t& position, StreamCheck& check) {
    if (event.kind == Kind::kLost) {
      // It starts right after what was seen, or after hidden sequences the cursor skipped.
      if (event.lost_first <= position || NextVisible(position) < event.lost_first ||
          event.lost_last < event.lost_first || event.sequence != event.lost_last) {
        Fail(check,
             absl::StrCat("bad lost ", event.lost_first, "..", event.lost_last, " at ", position));
      }
      ++check.lost;
      position = event.lost_last;
      return;
    }
    if (event.sequence != NextVisible(position)) {
      Fail(check, absl::StrCat("got ", event.sequence, " after ", position));
    }
    ++check.events;
    position = event.sequence;
  }

  WatchHub& hub_;
  uint64_t id_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool woken_ = false;
};

std::vector<StreamCheck> RunStream(size_t capacity) {
  WatchHub hub(capacity);
  std::vector<std::unique_ptr<Taker>> takers;
  for (int i = 0; i < 4; ++i) takers.push_back(std::make_unique<Taker>(hub));
  std::vector<StreamCheck> checks(takers.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < takers.size(); ++i) {
    threads.emplace_back([&, i] { checks[i] = takers[i]->Run(); });
  }
  std::thread appender([&] {
    WatchHub::Wakes wakes;
    for (uint64_t s = 1; s <= kStreamEvents; ++s) {
      const uint32_t owner = VisibleInStream(s) ? kOwner : 2000;
      hub.Append(Published(s, absl::StrCat("s/", s % 100), owner), &wakes);
      RunAll(wakes);
    }
  });
  appender.join();
  for (auto& thread : threads) thread.join();
  WatchHub::Wakes wakes;
  hub.Shutdown(&wakes);
  RunAll(wakes);
  return checks;
}

TEST(WatchHub, ConcurrentTakersWithALargeLogSeeEverything) {
  uint64_t visible = 0;
  for (uint64_t s = 1; s <= kStreamEvents; ++s) visible += VisibleInStream(s) ? 1 : 0;
  for (const auto& check : RunStream(kStreamEvents)) {
    EXPECT_TRUE(check.ok) << check.failure;
    EXPECT_EQ(check.lost, 0u);
    EXPECT_EQ(check.events, visible);
  }
}

TEST(WatchHub, ConcurrentTakersWithASmallLogSeeOnlyLostGaps) {
  for (const auto& check : RunStream(16)) {
    EXPECT_TRUE(check.ok) << check.failure;
    EXPECT_GT(check.events, 0u);
  }
}

}  // namespace
}  // namespace tensorbroker::daemon
