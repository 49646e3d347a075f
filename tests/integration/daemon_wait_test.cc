// The tests' one way of waiting for a daemon (tests/support/daemon_wait.h), with the real
// tensorbrokerd: a daemon that exits on its way up fails the wait at once, not at its deadline,
// and the failure quotes the exit status and the daemon's own error line, for DaemonProcess and
// for the systemd harness's fixture alike; a state never reached fails at the deadline, quoting
// the last answer and the log; a long log is quoted by its last lines.
#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/integration/harnessed_daemon_test.h"
#include "tests/integration/test_util.h"
#include "tests/support/daemon_wait.h"

namespace tensorbroker::testing {
namespace {

// What tensorbrokerd prints, and exits 2, when --capacity is not a size.
constexpr char kCapacityError[] =
    "tensorbrokerd: --capacity 'nonsense' is not a size (examples: 1048576, 512M, 4G, 1.5GiB)";
// "At once" as opposed to the deadline (kDaemonWaitDeadline, 30 s; the harness's 60 s): before
// half of it has passed, so the deadline cannot be what ended the wait, however loaded the
// machine is (the daemon exits within milliseconds of its start).
const auto kAtOnce = absl::ToChronoSeconds(kDaemonWaitDeadline / 2);

TEST(DaemonWaitTest, DaemonProcessFailsAtOnceWithTheExitStatusAndLogOfADaemonThatExits) {
  const auto started = std::chrono::steady_clock::now();
  auto daemon = DaemonProcess::Start({"--capacity", "nonsense"});
  const auto took = std::chrono::steady_clock::now() - started;
  ASSERT_FALSE(daemon.ok());
  EXPECT_EQ(daemon.status().code(), absl::StatusCode::kInternal) << daemon.status();
  const absl::string_view message = daemon.status().message();
  EXPECT_TRUE(
      absl::StartsWith(message, "tensorbrokerd exited (exit status 2) before it was serving on "))
      << message;
  EXPECT_TRUE(
      absl::EndsWith(message, absl::StrCat("/broker.sock; its log:\n  | ", kCapacityError, "\n")))
      << message;
  EXPECT_LT(took, kAtOnce);
}

class HarnessedWaitTest : public HarnessedDaemonTest {};

TEST_F(HarnessedWaitTest, StartFailsAtOnceWithTheExitStatusAndLogOfADaemonThatExits) {
  const auto started = std::chrono::steady_clock::now();
  const absl::Status s = StartDaemon({"--capacity", "nonsense"});
  const auto took = std::chrono::steady_clock::now() - started;
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_EQ(s.message(), absl::StrCat("tensorbrokerd exited (exit status 2) before it was ready "
                                      "(READY=1); its log:\n  | ",
                                      kCapacityError, "\n"));
  EXPECT_LT(took, kAtOnce);
  EXPECT_EQ(pid_, -1);  // reaped: nothing left for TearDown to stop
}

TEST(DaemonWaitTest, AStateNeverReachedFailsAtTheDeadlineQuotingTheLastAnswerAndTheLog) {
  ASSERT_OK_AND_ASSIGN(DaemonProcess daemon, DaemonProcess::Start({"--log-level", "info"}));
  const WatchedDaemon watched{[] { return std::optional<int>(); },
                              [&daemon] { return daemon.Log(); }};
  // Its start-up line, waited for the same way (written just after the socket serves).
  const std::string serving = absl::StrCat("<6>tensorbrokerd serving on ", daemon.socket_path());
  ASSERT_OK(WaitForDaemon(watched, "logging its start", [&] {
    return absl::StrContains(daemon.Log(), serving) ? absl::OkStatus()
                                                    : absl::NotFoundError("not yet");
  }));
  const absl::Status s = WaitForDaemon(
      watched, "somewhere it never goes", [] { return absl::UnavailableError("not there"); },
      absl::Milliseconds(100));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_TRUE(absl::StartsWith(s.message(),
                               "tensorbrokerd is not somewhere it never goes after 100ms "
                               "(UNAVAILABLE: not there); its log:\n"))
      << s;
  EXPECT_TRUE(absl::StrContains(s.message(), absl::StrCat("\n  | ", serving, " capacity="))) << s;
  ASSERT_OK_AND_ASSIGN(int status, daemon.Stop());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << DescribeExit(status);
}

TEST(DaemonWaitTest, ALongLogIsQuotedByItsLastLines) {
  std::vector<std::string> lines;
  for (int i = 1; i <= 150; ++i) lines.push_back(absl::StrCat("line ", i));
  std::string want = "  | (50 earlier lines left out)\n";
  for (int i = 51; i <= 150; ++i) absl::StrAppend(&want, "  | line ", i, "\n");
  EXPECT_EQ(QuoteLastLines(absl::StrJoin(lines, "\n") + "\n"), want);
  EXPECT_EQ(QuoteLastLines(""), "  | (empty)\n");
  EXPECT_EQ(QuoteLastLines("one\ntwo"), "  | one\n  | two\n");
}

TEST(DaemonWaitTest, ExitsAreDescribedByStatusOrSignal) {
  EXPECT_EQ(DescribeExit(2 << 8), "exit status 2");
  EXPECT_EQ(DescribeExit(SIGKILL), "killed by signal 9 (Killed)");
}

}  // namespace
}  // namespace tensorbroker::testing
