// fork() and the client (client/src/fork_guard.h), with the real daemon: a child forked from a
// process that has connected may not connect (FAILED_PRECONDITION saying what to do instead),
// the clients and watchers it inherited refuse their calls, and dropping them there leaves the
// parent's connections alone: afterwards the parent's calls, watch and leases go on as before.
// The child reports through its exit status (0: every check in it held).
#include <sys/wait.h>

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "tests/integration/test_util.h"
#include "tests/support/subprocess.h"

namespace tensorbroker::testing {
namespace {

using ForkTest = BrokerTest;

// Runs `body` in a forked child and returns the child's wait status (-1: no child).
int RunInForkedChild(const std::function<int()>& body) {
  absl::StatusOr<Subprocess> child = Subprocess::Fork(body);
  EXPECT_TRUE(child.ok()) << child.status();
  if (!child.ok()) return -1;
  return child->Wait().value_or(-1);
}

bool RefusedForFork(const absl::Status& status) {
  return status.code() == absl::StatusCode::kFailedPrecondition &&
         absl::StrContains(status.message(), "fork()");
}

TEST_F(ForkTest, AForkedChildMayNotConnectOrUseWhatItInheritedAndTheParentGoesOn) {
  ASSERT_OK(PutFloats(client(), "fork/a", {1, 2, 3}));
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw, client().Get("fork/a"));
  TensorPtr view(raw);
  // In the segment fork/a mapped: a Get from the directory, its lease a slot of the table.
  ASSERT_OK(PutFloats(client(), "fork/s", {5, 6}));
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw_slot, client().Get("fork/s"));
  TensorPtr slot_view(raw_slot);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Watcher> watcher, client().Watch("fork/"));
  std::unique_ptr<Client> second = NewClient();
  ASSERT_NE(second, nullptr);
  // Let the parent's other threads (gRPC's, just busy connecting `second`, and the release
  // flusher) go idle first: a sanitizer runtime that does not lock its allocator around fork()
  // (GCC 12's ASan) can leave the child deadlocked in its first malloc if another thread was
  // inside malloc at the fork. CI's ASan stage hung here once in three runs.
  absl::SleepFor(absl::Milliseconds(300));

  const int status = RunInForkedChild([&]() -> int {
    auto fresh = Client::Connect(socket());
    if (!RefusedForFork(fresh.status())) return 1;
    if (!RefusedForFork(client().Stat("fork/a").status())) return 2;
    if (!RefusedForFork(client().Get("fork/a").status())) return 3;
    if (!RefusedForFork(client().Create("fork/c", {1}, dtypes::kFloat32).status())) return 4;
    if (!RefusedForFork(watcher->Next(std::chrono::milliseconds(0)).status())) return 5;
    // The inherited view still reads its bytes: the mapping came with the fork.
    if (FloatsOf(view->dl_tensor) != std::vector<float>{1, 2, 3}) return 6;
    // Dropping what it inherited does not touch the parent's connections or lease table.
    view.reset();
    slot_view.reset();
    watcher.reset();
    second.reset();
    return 0;
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << DescribeWaitStatus(status);

  // The parent goes on: its lease, its calls on both clients, its watch.
  ASSERT_OK_AND_ASSIGN(TensorInfo a, client().Stat("fork/a"));
  EXPECT_EQ(a.leases, 1u);
  ASSERT_OK_AND_ASSIGN(TensorInfo s, client().Stat("fork/s"));
  EXPECT_EQ(s.leases, 1u) << "the parent's slot is still taken";
  EXPECT_EQ(FloatsOf(slot_view->dl_tensor), (std::vector<float>{5, 6}));
  slot_view.reset();
  EXPECT_EQ(FloatsOf(view->dl_tensor), (std::vector<float>{1, 2, 3}));
  ASSERT_OK_AND_ASSIGN(TensorInfo b, PutFloats(*second, "fork/b", {4}));
  ASSERT_OK_AND_ASSIGN(std::optional<WatchEvent> event, watcher->Next(std::chrono::seconds(10)));
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(event->kind, WatchEvent::Kind::kPublished);
  EXPECT_EQ(event->name, "fork/b");
  EXPECT_EQ(event->version, b.version);
  ASSERT_OK(second->Ping());
  view.reset();
  ASSERT_OK_AND_ASSIGN(a, client().Stat("fork/a"));
  EXPECT_EQ(a.leases, 0u);
}

}  // namespace
}  // namespace tensorbroker::testing
