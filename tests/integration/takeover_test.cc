// tensorbrokerd --takeover, without systemd: a new daemon started on a running one's socket is
// handed its tensors, sockets and lock over the local channel, and the old one exits. Checked
// with a consumer cycling Get/release throughout (it must see no failed call: it rides
// through), a view held across the hand-over (still valid, leased again), every tensor's bytes
// and version afterwards, and the socket files (the new daemon owns and removes them). The gap
// a client sees (its slowest Get while the daemon changed) is printed, not asserted.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/integration/test_util.h"
#include "tests/support/temp_dir.h"

namespace tensorbroker::testing {
namespace {

class TakeoverTest : public BrokerTest {
 protected:
  std::vector<std::string> ExtraArgs() const override { return {"--log-level", "notice"}; }
};

TEST_F(TakeoverTest, ANewDaemonTakesOverTensorsSocketsAndClientsWithNoFailedCall) {
  ASSERT_OK_AND_ASSIGN(TensorInfo small, PutFloats(client(), "small", Floats(64, 1)));
  ASSERT_OK_AND_ASSIGN(TensorInfo large, PutFloats(client(), "large", Floats(5 << 20, 2)));
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw, client().Get("small"));
  TensorPtr held(raw);
  const pid_t old_pid = daemon_->pid();

  // A consumer cycling Get/release on its own client throughout.
  std::atomic<bool> stop{false};
  std::atomic<int> cycles{0}, failures{0};
  std::atomic<int64_t> slowest_us{0};
  std::string first_failure;
  std::thread consumer([&] {
    auto c = Client::Connect(socket());
    if (!c.ok()) {
      ++failures;
      first_failure = c.status().ToString();
      return;
    }
    while (!stop.load()) {
      const auto start = std::chrono::steady_clock::now();
      auto got = (*c)->Get("small");
      const int64_t us = std::chrono::duration_cast<std::chrono::microseconds>(
                             std::chrono::steady_clock::now() - start)
                             .count();
      for (int64_t seen = slowest_us.load();
           us > seen && !slowest_us.compare_exchange_weak(seen, us);) {
      }
      if (!got.ok()) {
        if (failures++ == 0) first_failure = got.status().ToString();
        continue;
      }
      TensorPtr t(*got);
      if (FloatsOf(t->dl_tensor) != Floats(64, 1) && failures++ == 0) first_failure = "bytes";
      ++cycles;
    }
  });
  ASSERT_TRUE(PollUntil([&] { return cycles.load() > 50; }, std::chrono::seconds(30)));

  // The successor: DaemonProcess waits until the socket answers (it always does: the old
  // daemon until it hands over, the new one after).
  ASSERT_OK_AND_ASSIGN(DaemonProcess successor,
                       DaemonProcess::StartOn(socket(), {"--takeover", "--log-level", "notice"}));
  int status = 0;
  ASSERT_EQ(::waitpid(old_pid, &status, 0), old_pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << DescribeWaitStatus(status);
  daemon_->MarkReaped();  // its object still owns the socket's directory
  const int before = cycles.load();
  ASSERT_TRUE(PollUntil([&] { return cycles.load() > before + 50; }, std::chrono::seconds(30)));
  stop = true;
  consumer.join();
  EXPECT_EQ(failures.load(), 0) << first_failure;
  std::cout << "takeover: " << cycles.load() << " Get/release cycles, " << failures.load()
            << " failed; the slowest Get (the gap a client saw) took " << slowest_us.load()
            << " us\n";

  // Everything came over: bytes, versions; the held view still reads and is leased again (by
  // the client's first call on the new daemon).
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * large_raw, client().Get("large"));
  TensorPtr large_view(large_raw);
  EXPECT_EQ(FloatsOf(large_view->dl_tensor), Floats(5 << 20, 2));
  EXPECT_EQ(FloatsOf(held->dl_tensor), Floats(64, 1));
  ASSERT_OK_AND_ASSIGN(TensorInfo small_after, client().Stat("small"));
  EXPECT_EQ(small_after.version, small.version);
  EXPECT_EQ(small_after.leases, 1u);
  held.reset();
  ASSERT_OK_AND_ASSIGN(TensorInfo large_after, client().Stat("large"));
  EXPECT_EQ(large_after.version, large.version);
  large_view.reset();
  ASSERT_OK_AND_ASSIGN(TensorInfo fresh, PutFloats(client(), "fresh", Floats(4, 3)));
  EXPECT_GT(fresh.version, std::max(small.version, large.version));

  // The successor owns the sockets now: it removes them when it stops.
  const std::string path = socket();
  client_.reset();
  ASSERT_OK_AND_ASSIGN(int stopped, successor.Stop());
  EXPECT_TRUE(WIFEXITED(stopped) && WEXITSTATUS(stopped) == 0) << DescribeWaitStatus(stopped);
  struct stat gone {};
  EXPECT_NE(::stat(path.c_str(), &gone), 0);
  EXPECT_NE(::stat((path + ".fd").c_str(), &gone), 0);
  daemon_.reset();  // removes the directory
}

TEST_F(TakeoverTest, WithNothingRunningTakeoverFailsAndSaysSo) {
  const std::string elsewhere = socket() + ".nobody";
  auto started = DaemonProcess::StartOn(elsewhere, {"--takeover"});
  ASSERT_FALSE(started.ok());
  // The start fails quoting the daemon's exit status and its log, which says why.
  EXPECT_EQ(
      started.status().message(),
      absl::StrCat("tensorbrokerd exited (exit status 1) before it was serving on ", elsewhere,
                   "; its log:\n  | <3>tensorbrokerd: --takeover: no daemon to "
                   "take over on ",
                   elsewhere, ".fd: No such file or directory\n"));
}

// During a takeover (or a restart) a client's Session stream and its local channel may reach
// different daemons: the local one knows no such session. Connect then opens again, until its
// timeout, rather than fail. Staged with symlinks: broker.sock leads to daemon A, broker.sock.fd
// to daemon B, until the link is moved to A's.
TEST(TakeoverRaceTest, AnOpenWhoseSessionAndLocalChannelReachDifferentDaemonsIsMadeAgain) {
  ASSERT_OK_AND_ASSIGN(DaemonProcess a, DaemonProcess::Start());
  ASSERT_OK_AND_ASSIGN(DaemonProcess b, DaemonProcess::Start());
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string socket = dir.path() + "/broker.sock";
  ASSERT_EQ(::symlink(a.socket_path().c_str(), socket.c_str()), 0);
  ASSERT_EQ(::symlink((b.socket_path() + ".fd").c_str(), (socket + ".fd").c_str()), 0);

  // While the halves disagree, every try is refused; at the timeout the refusal is the answer.
  auto split = Client::Connect(socket, std::chrono::milliseconds(300));
  EXPECT_EQ(split.status().code(), absl::StatusCode::kFailedPrecondition) << split.status();
  EXPECT_NE(split.status().message().find("session_id: not an open session"), std::string::npos)
      << split.status();

  // The local channel's link moves to A while Connect is trying: it succeeds on A.
  std::thread mover([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const std::string next = socket + ".fd.next";
    ASSERT_EQ(::symlink((a.socket_path() + ".fd").c_str(), next.c_str()), 0);
    ASSERT_EQ(::rename(next.c_str(), (socket + ".fd").c_str()), 0);
  });
  auto joined = Client::Connect(socket, std::chrono::seconds(30));
  mover.join();
  ASSERT_OK(joined);
  std::vector<float> values = {1, 2, 3};
  std::vector<int64_t> shape = {3};
  ASSERT_OK((*joined)->Put("race/x", HostTensor(values.data(), shape, dtypes::kFloat32)));
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw, (*joined)->Get("race/x"));
  TensorPtr got(raw);
  EXPECT_EQ(FloatsOf(got->dl_tensor), values);
  // Both halves are A's: B never saw the tensor.
  ASSERT_OK_AND_ASSIGN(auto on_b, Client::Connect(b.socket_path()));
  EXPECT_EQ(on_b->Stat("race/x").status().code(), absl::StatusCode::kNotFound);
  ASSERT_OK_AND_ASSIGN(auto on_a, Client::Connect(a.socket_path()));
  ASSERT_OK_AND_ASSIGN(TensorInfo info, on_a->Stat("race/x"));
  EXPECT_EQ(info.leases, 1u);
}

}  // namespace
}  // namespace tensorbroker::testing
