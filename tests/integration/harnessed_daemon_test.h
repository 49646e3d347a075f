// A test fixture that runs tensorbrokerd under tests/support/service_manager_harness.h, the
// harness that plays systemd (the descriptor store, socket activation): Start() hands the
// daemon what the harness keeps and waits for READY=1; Stop(signal) waits for the exit and for
// every message the daemon sent. TearDown SIGKILLs a daemon still running.
#ifndef TENSORBROKER_TESTS_INTEGRATION_HARNESSED_DAEMON_TEST_H_
#define TENSORBROKER_TESTS_INTEGRATION_HARNESSED_DAEMON_TEST_H_

#include <signal.h>
#include <sys/wait.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "tests/integration/test_util.h"
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
  void Start(const std::vector<std::string>& args = {"--capacity", "256M", "--log-level",
                                                       "info"}) {
    std::vector<std::string> argv = {DaemonBinaryPath(), "--socket", socket_};
    argv.insert(argv.end(), args.begin(), args.end());
    auto pid = harness_->Start(argv);
    ASSERT_TRUE(pid.ok()) << pid.status();
    pid_ = *pid;
    ASSERT_TRUE(harness_->WaitFor([&] { return harness_->ready(); }, absl::Seconds(60)))
        << "no READY=1 from tensorbrokerd";
  }
  // Sends `signal`, waits for the exit and reads every message it sent; the wait status.
  int Stop(int signal) {
    ::kill(pid_, signal);
    int status = 0;
    EXPECT_EQ(::waitpid(pid_, &status, 0), pid_);
    pid_ = -1;
    harness_->Drain();
    return status;
  }

  std::unique_ptr<ServiceManagerHarness> harness_;
  std::string socket_;
  pid_t pid_ = -1;
};

}  // namespace tensorbroker::testing

#endif  // TENSORBROKER_TESTS_INTEGRATION_HARNESSED_DAEMON_TEST_H_
