// Watch streams through the client library (issue 17), against a real daemon: events in order
// with the right kinds, a stalled watcher that gets exactly one LOST and then goes on while the
// daemon's memory stays bounded and another watcher is not held up, and a watcher killed
// mid-stream that leaves nothing behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/integration/peer_process.h"
#include "tests/integration/test_util.h"
#include "tests/support/process_footprint.h"
#include "tests/support/sanitizer_build.h"

namespace tensorbroker::testing {
namespace {

using Kind = WatchEvent::Kind;

// How much the daemon's RssAnon may grow while a watcher stalls over 60,000 versions. Queueing
// events for it would take over 11 MiB; plain and ASan builds stay within 1 MiB. Under TSan the
// runtime's own bookkeeping grows with every operation (about 9 MiB here), so the bound there is
// 64 MiB: it still catches a queue of events, which would grow several times over under TSan's
// allocator.
constexpr size_t kStallGrowthKib = kThreadSanitizer ? 64 << 10 : 6 << 10;

// The next event, failing the test when none comes within 10 s.
WatchEvent NextEvent(Watcher& watcher) {
  auto event = watcher.Next(std::chrono::seconds(10));
  EXPECT_TRUE(event.ok()) << event.status();
  if (!event.ok() || !event->has_value()) {
    ADD_FAILURE() << "no event within 10 s";
    return {};
  }
  return **event;
}

class WatchTest : public BrokerTest {
 protected:
  void SetUp() override {
    KeepAsanQuarantineSmall();  // the stalled-watcher test measures the daemon's RssAnon
    BrokerTest::SetUp();
  }
  // A short log, so that a stalled watcher falls behind it quickly.
  std::vector<std::string> ExtraArgs() const override {
    return {"--log-level", "warning", "--watch-log", "256"};
  }
  uint64_t Watchers() {
    auto stats = client().Stats();
    EXPECT_TRUE(stats.ok()) << stats.status();
    return stats.ok() ? stats->watchers : ~0ull;
  }
  TensorInfo Publish(const std::string& name, float value, uint32_t keep = 1) {
    PutOptions options;
    options.replace = true;
    options.keep = keep;
    auto info = PutFloats(client(), name, {value, value}, options);
    EXPECT_TRUE(info.ok()) << info.status();
    return info.ok() ? *info : TensorInfo{};
  }
};

TEST_F(WatchTest, AWatcherSeesEveryEventUnderItsPrefixInOrder) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Watcher> watcher, client().Watch("cam/"));
  EXPECT_EQ(Watchers(), 1u);
  const TensorInfo a1 = Publish("cam/a", 1);
  Publish("other/x", 1);  // not under the prefix
  const TensorInfo a2 = Publish("cam/a", 2);
  std::vector<TensorInfo> h;
  for (int i = 0; i < 3; ++i) h.push_back(Publish("cam/h", static_cast<float>(i), /*keep=*/2));
  ASSERT_TRUE(client().Delete("cam/a").ok());
  struct Seen {
    Kind kind;
    std::string name;
    uint64_t version;
    bool operator==(const Seen& o) const {
      return kind == o.kind && name == o.name && version == o.version;
    }
  };
  std::vector<Seen> seen;
  uint64_t last = 0;
  for (int i = 0; i < 7; ++i) {
    const WatchEvent event = NextEvent(*watcher);
    EXPECT_GT(event.sequence, last);
    last = event.sequence;
    seen.push_back({event.kind, event.name, event.version});
    if (event.kind == Kind::kReplaced && event.name == "cam/a") {
      EXPECT_EQ(event.previous_version, a1.version);
      EXPECT_EQ(event.info.shape, (std::vector<int64_t>{2}));
    }
  }
  EXPECT_EQ(seen, (std::vector<Seen>{{Kind::kPublished, "cam/a", a1.version},
                                     {Kind::kReplaced, "cam/a", a2.version},
                                     {Kind::kPublished, "cam/h", h[0].version},
                                     {Kind::kReplaced, "cam/h", h[1].version},
                                     {Kind::kReplaced, "cam/h", h[2].version},
                                     {Kind::kExpired, "cam/h", h[0].version},
                                     {Kind::kDeleted, "cam/a", a2.version}}));
  EXPECT_EQ(watcher->last_sequence(), last);
  // Nothing more: Next times out.
  ASSERT_OK_AND_ASSIGN(std::optional<WatchEvent> none,
                       watcher->Next(std::chrono::milliseconds(50)));
  EXPECT_FALSE(none.has_value());
  // Close from another thread wakes a waiting Next with CANCELLED.
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    watcher->Close();
  });
  EXPECT_EQ(watcher->Next(std::chrono::seconds(30)).status().code(), absl::StatusCode::kCancelled);
  closer.join();
  watcher.reset();
  EXPECT_TRUE(PollUntil([&] { return Watchers() == 0; }, kHangGuard));
  EXPECT_EQ(client().Watch("bad prefix").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(WatchTest, AStalledWatcherGetsOneLostEventAndHoldsNothingUp) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Watcher> stalled, client().Watch("s/"));
  std::unique_ptr<Client> other = NewClient();
  ASSERT_NE(other, nullptr);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Watcher> keeping_up, other->Watch("s/"));
  // A first stretch fills the log (and the allocator's caches), leaving the stalled watcher
  // far behind; over the second the daemon's memory must stay flat. Queueing events for the
  // stalled watcher instead would take at least 200 bytes each: over 11 MiB here.
  constexpr int kWarmUp = 5000;
  constexpr int kMeasured = 60000;
  constexpr int kVersions = kWarmUp + kMeasured;
  // The second watcher reads as they come: it sees every one, with no LOST. The publisher
  // stays at most kMaxLead events ahead of it (a quarter of the 256-event log), so a reader
  // starved of CPU on a loaded machine does not fall out of the log either.
  constexpr int kMaxLead = 64;
  std::atomic<int> kept_up_lost{0};
  std::atomic<int> kept_up_seen{0};
  std::atomic<bool> reader_done{false};
  std::vector<uint64_t> kept_up_versions;
  std::thread reader([&] {
    while (kept_up_versions.size() < kVersions) {
      auto event = keeping_up->Next(std::chrono::seconds(60));
      if (!event.ok() || !event->has_value()) break;
      if ((*event)->kind == Kind::kLost) {
        ++kept_up_lost;
      } else {
        kept_up_versions.push_back((*event)->version);
      }
      kept_up_seen.fetch_add(1, std::memory_order_release);
    }
    reader_done = true;
  });
  std::vector<uint64_t> published;
  size_t rss_before = 0;
  size_t rss_most = 0;
  for (int i = 0; i < kVersions; ++i) {
    const bool reader_kept_up = PollUntil(
        [&] { return reader_done || i - kept_up_seen.load(std::memory_order_acquire) < kMaxLead; },
        kHangGuard, std::chrono::milliseconds(1));
    if (!reader_kept_up) {
      ADD_FAILURE() << "the keeping-up watcher saw " << kept_up_seen << " of " << i << " events";
      break;
    }
    published.push_back(Publish("s/x", static_cast<float>(i)).version);
    if (i == kWarmUp) rss_before = rss_most = FootprintOf(daemon_->pid()).rss_anon_kib;
    if (i > kWarmUp && i % 1000 == 0) {
      rss_most = std::max(rss_most, FootprintOf(daemon_->pid()).rss_anon_kib);
    }
  }
  reader.join();
  EXPECT_EQ(kept_up_lost.load(), 0);
  EXPECT_EQ(kept_up_versions, published);
  // The daemon's memory stays bounded by its log, whatever the stalled watcher does.
  EXPECT_LT(rss_most - rss_before, kStallGrowthKib)
      << "RssAnon grew from " << rss_before << " KiB to " << rss_most << " KiB";
  EXPECT_EQ(Watchers(), 2u);
  // The stalled one: what the socket and the daemon's window held, then ONE LOST for what fell
  // out of the log, then the rest, up to the last version, with no other gap.
  std::vector<WatchEvent> events;
  while (events.empty() || events.back().version != published.back()) {
    events.push_back(NextEvent(*stalled));
    if (::testing::Test::HasFailure()) return;
  }
  int lost = 0;
  uint64_t expect_next = 0;  // the version after the previous event's, while contiguous
  for (size_t i = 0; i < events.size(); ++i) {
    const WatchEvent& e = events[i];
    if (e.kind == Kind::kLost) {
      ++lost;
      ASSERT_GT(i, 0u);
      EXPECT_EQ(e.lost_first, events[i - 1].sequence + 1);
      EXPECT_EQ(events[i + 1].sequence, e.lost_last + 1) << "the log goes on right after the gap";
      expect_next = 0;
      continue;
    }
    EXPECT_EQ(e.kind, i == 0 ? Kind::kPublished : Kind::kReplaced);
    if (expect_next != 0) {
      EXPECT_EQ(e.version, expect_next) << "at event " << i;
    }
    expect_next = e.version + 1;  // one publisher, keep 1: versions are consecutive here
  }
  EXPECT_EQ(lost, 1);
  EXPECT_LT(events.size(), 2000u) << "the stalled watcher was queued for, not left behind";
  std::cout << "stalled watcher: daemon RssAnon " << rss_before << " KiB after " << kWarmUp
            << " versions, at most " << rss_most << " KiB over the next " << kMeasured << "; then "
            << events.size() << " events, one LOST\n";
}

TEST_F(WatchTest, AWatcherKilledMidStreamLeavesNothingBehind) {
  Publish("k/x", 0);  // the segment it lives in (and its descriptors) is there from now on
  ASSERT_OK_AND_ASSIGN(BrokerStats baseline, client().Stats());
  const ProcessFootprint before = FootprintOf(daemon_->pid());
  ASSERT_OK_AND_ASSIGN(PeerProcess peer, PeerProcess::Start(socket(), {"watch", "k/"}));
  ASSERT_OK_AND_ASSIGN(std::string line, peer.ReadLine());
  ASSERT_EQ(line, "watching");
  const TensorInfo first = Publish("k/x", 1);
  ASSERT_TRUE(peer.WriteLine("next").ok());
  ASSERT_OK_AND_ASSIGN(line, peer.ReadLine());
  EXPECT_EQ(line, absl::StrCat("event replaced ", first.version, " k/x ", first.version));
  for (int i = 0; i < 100; ++i) Publish("k/x", static_cast<float>(i));  // mid-stream
  EXPECT_EQ(Watchers(), 1u);
  peer.Signal(SIGKILL);
  (void)peer.Wait();
  EXPECT_TRUE(PollUntil(
      [&] {
        auto stats = client().Stats();
        return stats.ok() && stats->watchers == 0 && stats->clients == baseline.clients;
      },
      kHangGuard));
  // No more than before (gRPC's own threads may have ended meanwhile, with their descriptors).
  EXPECT_TRUE(PollUntil([&] { return FootprintOf(daemon_->pid()).fds <= before.fds; }, kHangGuard))
      << "daemon fds " << FootprintOf(daemon_->pid()).fds << ", were " << before.fds;
  // The daemon still serves.
  EXPECT_GT(Publish("k/x", 2).version, first.version);
}

}  // namespace
}  // namespace tensorbroker::testing
