// A test fixture that runs tensorbrokerd under tests/support/service_manager_harness.h, the
// harness that plays systemd (the descriptor store, socket activation): Start() hands the
// daemon what the harness keeps and waits for READY=1 (WaitForDaemon: bounded, and failing at
// once with the daemon's exit status and log when it exits first); Stop(signal) waits for the
// exit and for every message the daemon sent. The daemon's stderr goes through a DaemonLog
// (shown as it comes, and kept for Log()). TearDown SIGKILLs a daemon still running.
#ifndef TENSORBROKER_TESTS_INTEGRATION_HARNESSED_DAEMON_TEST_H_
#define TENSORBROKER_TESTS_INTEGRATION_HARNESSED_DAEMON_TEST_H_

#include <signal.h>
#include <sys/wait.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "tests/integration/test_util.h"
#include "tests/support/daemon_log.h"
#include "tests/support/daemon_wait.h"
#include "tests/support/service_manager_harness.h"

namespace tensorbroker::testing {

class HarnessedDaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto harness = ServiceManagerHarness::CreateInTemporaryDirectory();
    ASSERT_TRUE(harness.ok()) << harness.status();
    harness_ = std::move(*harness);
    socket_ = harness_->directory() + "/broker.sock";
  }
  void TearDown() override {
    if (pid_ > 0) Stop(SIGKILL);
    harness_.reset();
  }

  // Starts tensorbrokerd on socket_ with `args` (after --socket) and waits for READY=1.
  void Start(const std::vector<std::string>& args = {"--capacity", "256M", "--log-level", "info"}) {
    ASSERT_OK(StartDaemon(args));
  }
  // Start() as a status: WaitForDaemon's failure when the daemon does not get ready.
  absl::Status StartDaemon(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {DaemonBinaryPath(), "--socket", socket_};
    argv.insert(argv.end(), args.begin(), args.end());
    auto log = DaemonLog::Create();
    if (!log.ok()) return log.status();
    log_ = *std::move(log);
    auto pid = harness_->Start(argv, {}, log_->child_end());
    log_->CloseChildEnd();
    if (!pid.ok()) return pid.status();
    pid_ = *pid;
    const WatchedDaemon watched{[this]() -> std::optional<int> {
                                  std::optional<int> status = ReapIfExited(pid_);
                                  if (status.has_value()) pid_ = -1;  // nothing left to stop
                                  return status;
                                },
                                [this] { return Log(); }};
    // A start adopts what the harness keeps: 60 s against a hang under a sanitizer.
    return WaitForDaemon(
        watched, "ready (READY=1)",
        [this] {
          harness_->Drain();
          return harness_->ready() ? absl::OkStatus() : absl::UnavailableError("no READY=1 yet");
        },
        absl::Seconds(60));
  }
  // Sends `signal`, waits for the exit and reads every message it sent; the wait status.
  int Stop(int signal) {
    if (pid_ <= 0) {
      ADD_FAILURE() << "Stop(" << signal << "): no daemon running";
      return -1;
    }
    ::kill(pid_, signal);
    int status = 0;
    EXPECT_EQ(::waitpid(pid_, &status, 0), pid_);
    pid_ = -1;
    harness_->Drain();
    return status;
  }
  // What the daemon of the last Start() wrote to its stderr; to the end once it has exited
  // (pid_ is -1).
  std::string Log() const {
    if (log_ == nullptr) return "";
    // A hang guard, as in DaemonProcess: the end comes when the reader has read the last of it.
    if (pid_ <= 0) (void)log_->WaitForEnd(absl::Seconds(60));
    return log_->Text();
  }

  std::unique_ptr<ServiceManagerHarness> harness_;
  std::string socket_;
  pid_t pid_ = -1;
  std::unique_ptr<DaemonLog> log_;
};

}  // namespace tensorbroker::testing

#endif  // TENSORBROKER_TESTS_INTEGRATION_HARNESSED_DAEMON_TEST_H_
