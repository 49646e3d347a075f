// GetOptions::cancel: a GetCancellation ends a waiting Get from another thread with CANCELLED,
// and leaves nothing behind: no waiter in the daemon (Stats.waiting_gets), no lease (a grant
// that raced the cancellation is released), and the call counted as Get/CANCELLED.
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/integration/test_util.h"

namespace tensorbroker::testing {
namespace {

using CancelTest = BrokerTest;

uint64_t WaitingGets(Client& client) {
  auto stats = client.Stats();
  return stats.ok() ? stats->waiting_gets : ~uint64_t{0};
}

uint64_t CallsOf(Client& client, const std::string& method, int code) {
  auto stats = client.Stats();
  if (!stats.ok()) return ~uint64_t{0};
  for (const MethodStats& m : stats->methods) {
    if (m.method != method) continue;
    for (const auto& [c, calls] : m.calls) {
      if (c == code) return calls;
    }
  }
  return 0;
}

GetOptions WaitFor(std::chrono::milliseconds timeout, std::shared_ptr<GetCancellation> cancel) {
  GetOptions options;
  options.timeout = timeout;
  options.cancel = std::move(cancel);
  return options;
}

TEST_F(CancelTest, CancelFromAnotherThreadEndsTheWaitAndTheDaemonDropsTheWaiter) {
  auto cancel = std::make_shared<GetCancellation>();
  std::atomic<bool> returned{false};
  absl::Status result;
  std::thread waiter([&] {
    auto got = client().Get("cancel/absent", WaitFor(std::chrono::minutes(10), cancel));
    result = got.status();
    returned = true;
  });
  ASSERT_TRUE(PollUntil([&] { return WaitingGets(client()) == 1; }, kHangGuard))
      << "the Get never waited in the daemon";
  EXPECT_FALSE(returned.load());
  const auto asked = std::chrono::steady_clock::now();
  cancel->Cancel();
  waiter.join();
  const auto took = std::chrono::steady_clock::now() - asked;
  EXPECT_EQ(result.code(), absl::StatusCode::kCancelled) << result;
  EXPECT_NE(result.message().find("cancelled its wait for name=\"cancel/absent\""),
            std::string::npos)
      << result;
  EXPECT_LT(took, std::chrono::minutes(1)) << "ended by the cancellation, not a timeout";
  EXPECT_TRUE(cancel->cancelled());
  EXPECT_EQ(WaitingGets(client()), 0u);
  EXPECT_EQ(CallsOf(client(), "Get", static_cast<int>(absl::StatusCode::kCancelled)), 1u);

  // Publishing the name now grants nothing to the cancelled Get.
  ASSERT_OK(PutFloats(client(), "cancel/absent", {1, 2, 3}));
  ASSERT_OK_AND_ASSIGN(TensorInfo info, client().Stat("cancel/absent"));
  EXPECT_EQ(info.leases, 0u);
  ASSERT_OK_AND_ASSIGN(BrokerStats stats, client().Stats());
  EXPECT_EQ(stats.leases, 0u);
}

TEST_F(CancelTest, ACancelledTokenEndsEveryLaterGetAtOnceWithoutAskingTheDaemon) {
  ASSERT_OK(PutFloats(client(), "cancel/present", {1}));
  auto cancel = std::make_shared<GetCancellation>();
  cancel->Cancel();
  cancel->Cancel();  // idempotent
  const uint64_t gets_before = CallsOf(client(), "Get", 0);
  for (const char* name : {"cancel/present", "cancel/absent"}) {
    auto got = client().Get(name, WaitFor(std::chrono::seconds(30), cancel));
    EXPECT_EQ(got.status().code(), absl::StatusCode::kCancelled) << got.status();
    EXPECT_NE(got.status().message().find(absl::StrCat("get '", name, "': cancelled")),
              std::string::npos)
        << got.status();
  }
  EXPECT_EQ(CallsOf(client(), "Get", 0), gets_before);
  EXPECT_EQ(CallsOf(client(), "Get", static_cast<int>(absl::StatusCode::kCancelled)), 0u)
      << "nothing reached the daemon";
  ASSERT_OK_AND_ASSIGN(BrokerStats stats, client().Stats());
  EXPECT_EQ(stats.leases, 0u);
  EXPECT_EQ(stats.waiting_gets, 0u);
}

TEST_F(CancelTest, OneTokenCancelsManyWaitsOfManyThreads) {
  auto cancel = std::make_shared<GetCancellation>();
  constexpr int kWaiters = 8;
  std::vector<absl::Status> results(kWaiters);
  std::vector<std::thread> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    waiters.emplace_back([&, i] {
      results[i] =
          client()
              .Get(absl::StrCat("cancel/many/", i), WaitFor(std::chrono::minutes(10), cancel))
              .status();
    });
  }
  ASSERT_TRUE(PollUntil([&] { return WaitingGets(client()) == kWaiters; }, kHangGuard));
  cancel->Cancel();
  for (std::thread& t : waiters) t.join();
  for (int i = 0; i < kWaiters; ++i) {
    EXPECT_EQ(results[i].code(), absl::StatusCode::kCancelled) << i << ": " << results[i];
  }
  EXPECT_EQ(WaitingGets(client()), 0u);
}

// The cancellation races the publication: whichever wins, the Get returns either the tensor
// (then the caller holds one lease) or CANCELLED (then no lease is left), never both.
TEST_F(CancelTest, ACancellationRacingThePublicationLeavesNoLeaseAndNoWaiter) {
  constexpr int kRounds = 200;
  int granted = 0, cancelled = 0;
  for (int round = 0; round < kRounds; ++round) {
    const std::string name = absl::StrCat("cancel/race/", round);
    auto cancel = std::make_shared<GetCancellation>();
    absl::StatusOr<DLManagedTensorVersioned*> got = absl::UnknownError("not run");
    std::thread waiter([&] { got = client().Get(name, WaitFor(std::chrono::minutes(1), cancel)); });
    // Vary who comes first: sometimes the Get is not even sent before the cancellation.
    std::this_thread::sleep_for(std::chrono::microseconds(round * 5));
    std::thread publisher([&] { ASSERT_OK(PutFloats(client(), name, {1.0f * round})); });
    std::this_thread::sleep_for(std::chrono::microseconds((round % 7) * 50));
    cancel->Cancel();
    publisher.join();
    waiter.join();
    if (got.ok()) {
      ++granted;
      EXPECT_EQ(static_cast<float*>((*got)->dl_tensor.data)[0], 1.0f * round);
      ASSERT_OK_AND_ASSIGN(TensorInfo held, client().Stat(name));
      EXPECT_EQ(held.leases, 1u) << name;
      (*got)->deleter(*got);
    } else {
      ++cancelled;
      EXPECT_EQ(got.status().code(), absl::StatusCode::kCancelled) << got.status();
    }
    ASSERT_OK_AND_ASSIGN(TensorInfo info, client().Stat(name));
    EXPECT_EQ(info.leases, 0u) << name << (got.ok() ? " (granted)" : " (cancelled)");
  }
  ASSERT_OK_AND_ASSIGN(BrokerStats stats, client().Stats());
  EXPECT_EQ(stats.leases, 0u);
  EXPECT_EQ(stats.waiting_gets, 0u);
  std::printf("%d Gets granted, %d cancelled\n", granted, cancelled);
  EXPECT_EQ(granted + cancelled, kRounds);
}

}  // namespace
}  // namespace tensorbroker::testing
