// A real program run as another user, for the tests of who may serve and who may connect
// (identity_test.cc): a Subprocess (tests/support/subprocess.h) that drops to the uid (and a
// gid, no supplementary groups) and exec()s with exactly the environment given, in /; stdout
// and stderr captured. Needs root (unless the uid and gid are this process's own: then nothing
// is dropped).
//
//   ASSERT_OK_AND_ASSIGN(ProcessOutput put, RunAs(1000, 1000, {cli, "put", "x", "x.npy"}, {}));
//   EXPECT_EQ(put.err, "tensorbroker: ...\n");
//
// UidProcess owns a started child: the destructor SIGKILLs and reaps it if it still runs.
// Not thread-safe; one owner.
#ifndef TENSORBROKER_TESTS_INTEGRATION_UID_PROCESS_H_
#define TENSORBROKER_TESTS_INTEGRATION_UID_PROCESS_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tests/support/subprocess.h"

namespace tensorbroker::testing {

class UidProcess {
 public:
  // Starts `argv` (argv[0] a path) as uid/gid with environment `env` ("NAME=value" each).
  static absl::StatusOr<UidProcess> Start(uid_t uid, gid_t gid,
                                          const std::vector<std::string>& argv,
                                          const std::vector<std::string>& env);
  // The child's pid; -1 once reaped.
  pid_t pid() const { return process_.pid(); }
  // True while it has not exited (reaps it when it has; Finish still reports it).
  bool Running() { return !ExitStatus().has_value(); }
  // Its wait status once it has exited (reaps it; Finish still reports it), else nullopt.
  std::optional<int> ExitStatus() { return process_.ExitStatus(); }
  // What it wrote to its stderr so far, read without waiting (Finish still returns all of it).
  std::string ErrSoFar() { return process_.StderrSoFar(); }
  // Sends `signal` (0: none), reads its output to the end and reaps it. The 30 s bound only
  // guards against a hung child (then SIGKILL and DEADLINE_EXCEEDED), it measures nothing.
  absl::StatusOr<ProcessOutput> Finish(int signal = 0);

 private:
  explicit UidProcess(Subprocess process) : process_(std::move(process)) {}

  Subprocess process_;
};

// Start(...) then Finish().
absl::StatusOr<ProcessOutput> RunAs(uid_t uid, gid_t gid, const std::vector<std::string>& argv,
                                    const std::vector<std::string>& env);

// Waits until `socket_path` accepts a plain connection (a daemon listening there): WaitForDaemon
// (tests/support/daemon_wait.h), so bounded by kDaemonWaitDeadline, and failing at once, with
// the exit status and stderr, when `process` exits first.
absl::Status WaitUntilListening(const std::string& socket_path, UidProcess& process);

}  // namespace tensorbroker::testing

#endif  // TENSORBROKER_TESTS_INTEGRATION_UID_PROCESS_H_
