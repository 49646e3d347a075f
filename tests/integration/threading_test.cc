// Deleters and threads: a tensor outlives the Client that returned it (bytes readable, lease
// kept) and its deleter still releases the lease afterwards; deleters may run on another
// thread; many threads can Get and release concurrently on one Client with exact lease counts.
#include <atomic>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/integration/test_util.h"

namespace tensorbroker::testing {
namespace {

using ThreadingTest = BrokerTest;

std::vector<float> Ramp(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) * scale;
  return v;
}

TEST_F(ThreadingTest, TensorOutlivesItsClientAndTheDeleterStillReleasesTheLease) {
  ASSERT_OK_AND_ASSIGN(BrokerStats before, client().Stats());
  const std::vector<float> values = Ramp(5000, 0.25f);
  ASSERT_OK(PutFloats(client(), "life/a", values));
  ASSERT_OK_AND_ASSIGN(BrokerStats published, client().Stats());

  std::unique_ptr<Client> short_lived = NewClient();
  ASSERT_NE(short_lived, nullptr);
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * t, short_lived->Get("life/a"));
  ASSERT_OK_AND_ASSIGN(DLManagedTensor * legacy, short_lived->GetLegacy("life/a"));
  ASSERT_OK(short_lived->Ping());  // the second Get's lease, given back at once, is gone now
  EXPECT_EQ(LeasesOf(client(), "life/a"), 1) << "one lease per client and version";
  short_lived.reset();  // the Client is gone; its tensors are not

  EXPECT_EQ(FloatsOf(t->dl_tensor), values);
  EXPECT_EQ(FloatsOf(legacy->dl_tensor), values);
  EXPECT_EQ(LeasesOf(client(), "life/a"), 1) << "destroying the Client dropped a live lease";
  // Even unpublished, the memory stays while those leases live.
  ASSERT_OK(client().Delete("life/a"));
  ASSERT_OK_AND_ASSIGN(BrokerStats deleted, client().Stats());
  EXPECT_EQ(deleted.used_bytes, published.used_bytes);
  EXPECT_EQ(deleted.leases, 1u);
  EXPECT_EQ(FloatsOf(t->dl_tensor), values);

  t->deleter(t);
  ASSERT_OK_AND_ASSIGN(BrokerStats one, client().Stats());
  EXPECT_EQ(one.leases, 1u) << "the legacy handle still shares it";
  EXPECT_EQ(FloatsOf(legacy->dl_tensor), values);
  legacy->deleter(legacy);
  // The lease was the destroyed Client's: its release leaves when that client's channel closes.
  ASSERT_TRUE(PollUntil([&] {
    auto s = client().Stats();
    return s.ok() && s->leases == 0;
  }));
  ASSERT_OK_AND_ASSIGN(BrokerStats none, client().Stats());
  EXPECT_EQ(none.leases, 0u);
  EXPECT_EQ(none.used_bytes, before.used_bytes);
  // With its last tensor gone, the old Client's session ends too (the 1 s reclaim bound).
  EXPECT_TRUE(PollUntil([&] {
    auto s = client().Stats();
    return s.ok() && s->clients == 1;
  })) << "the destroyed Client's session is still open after its last tensor was released";
}

TEST_F(ThreadingTest, DeleterMayRunOnAnotherThread) {
  ASSERT_OK(PutFloats(client(), "thr/a", Ramp(100, 1.0f)));
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * t, client().Get("thr/a"));
  ASSERT_OK_AND_ASSIGN(DLManagedTensor * legacy, client().GetLegacy("thr/a"));
  EXPECT_EQ(LeasesOf(client(), "thr/a"), 1);
  std::thread([t] { t->deleter(t); }).join();
  EXPECT_EQ(LeasesOf(client(), "thr/a"), 1);
  std::thread([legacy] { legacy->deleter(legacy); }).join();
  EXPECT_EQ(LeasesOf(client(), "thr/a"), 0);

  // A tensor from a Client destroyed on one thread, released on another.
  std::unique_ptr<Client> other = NewClient();
  ASSERT_NE(other, nullptr);
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * u, other->Get("thr/a"));
  std::thread([&other] { other.reset(); }).join();
  std::thread([u] {
    EXPECT_EQ(FloatsOf(u->dl_tensor), Ramp(100, 1.0f));
    u->deleter(u);
  }).join();
  EXPECT_EQ(LeasesOf(client(), "thr/a"), 0);
}

TEST_F(ThreadingTest, ManyThreadsGetAndReleaseOnOneClient) {
  constexpr int kThreads = 8;
  constexpr int kIterations = 150;
  const std::vector<float> a = Ramp(1000, 1.0f);
  const std::vector<float> b = Ramp(70000, -0.5f);  // 280 KB
  ASSERT_OK(PutFloats(client(), "mt/a", a));
  ASSERT_OK(PutFloats(client(), "mt/b", b));

  std::atomic<int> failures{0};
  std::mutex kept_mu;
  std::vector<DLManagedTensorVersioned*> kept;  // released later by the main thread
  std::vector<std::thread> threads;
  for (int k = 0; k < kThreads; ++k) {
    threads.emplace_back([&, k] {
      for (int i = 0; i < kIterations; ++i) {
        const bool use_b = (i + k) % 3 == 0;
        const std::vector<float>& want = use_b ? b : a;
        auto t = client().Get(use_b ? "mt/b" : "mt/a");
        if (!t.ok()) {
          ++failures;
          ADD_FAILURE() << t.status();
          continue;
        }
        const float* p = reinterpret_cast<const float*>(DataOf((*t)->dl_tensor));
        if (ElementsOf((*t)->dl_tensor) != want.size() || p[0] != want[0] ||
            p[want.size() / 2] != want[want.size() / 2] || p[want.size() - 1] != want.back()) {
          ++failures;
        }
        if (i % 10 == 0) {
          std::lock_guard<std::mutex> lock(kept_mu);
          kept.push_back(*t);
        } else {
          (*t)->deleter(*t);
        }
        if (i % 25 == 0 && !client().Stat("mt/a").ok()) ++failures;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  ASSERT_EQ(kept.size(), static_cast<size_t>(kThreads * ((kIterations + 9) / 10)));
  ASSERT_OK_AND_ASSIGN(BrokerStats mid, client().Stats());
  std::set<const void*> versions_kept;
  for (DLManagedTensorVersioned* t : kept) versions_kept.insert(t->dl_tensor.data);
  EXPECT_EQ(mid.leases, versions_kept.size())
      << "one lease per version this client holds; it drifted under concurrency";
  // The kept ones are released from several threads at once.
  std::vector<std::thread> releasers;
  for (int k = 0; k < 4; ++k) {
    releasers.emplace_back([&, k] {
      for (size_t i = static_cast<size_t>(k); i < kept.size(); i += 4) {
        if (ElementsOf(kept[i]->dl_tensor) == a.size()) {
          if (FloatsOf(kept[i]->dl_tensor) != a) ++failures;
        } else if (FloatsOf(kept[i]->dl_tensor) != b) {
          ++failures;
        }
        kept[i]->deleter(kept[i]);
      }
    });
  }
  for (std::thread& t : releasers) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(LeasesOf(client(), "mt/a"), 0);
  EXPECT_EQ(LeasesOf(client(), "mt/b"), 0);
  ASSERT_OK_AND_ASSIGN(BrokerStats after, client().Stats());
  EXPECT_EQ(after.leases, 0u);
}

}  // namespace
}  // namespace tensorbroker::testing
