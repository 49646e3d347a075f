// Subprocess: the one way the C++ tests and benches run a child process. Spawn() fork()s and
// at once exec()s a program; Fork() runs a function in the child and _exit()s with what it
// returns. Between fork and exec (or the function) the child makes only async-signal-safe
// calls, so both are safe in a process that already runs gRPC threads (Fork()'s function must
// keep to that rule itself). Options: environment, stdin/stdout/stderr on pipes or given
// descriptors, a uid/gid to run as (setgroups, setresgid, setresuid: needs root), a working
// directory, a parent-death signal, a CPU affinity.
//
//   SubprocessOptions options;
//   options.capture_stdout = true;
//   ASSERT_OK_AND_ASSIGN(Subprocess child, Subprocess::Spawn({"/bin/echo", "hi"}, options));
//   ASSERT_OK_AND_ASSIGN(ProcessOutput done, child.Finish());  // done.out == "hi\n"
//
// Ownership: a Subprocess owns its child and the parent's ends of its pipes; the destructor
// SIGKILLs and reaps a child that was not reaped yet. Move-only; one owner, not thread-safe.
#ifndef TENSORBROKER_TESTS_SUPPORT_SUBPROCESS_H_
#define TENSORBROKER_TESTS_SUPPORT_SUBPROCESS_H_

#include <sched.h>
#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/unique_fd.h"

namespace tensorbroker::testing {

// What a finished child left: its wait status (WIFEXITED, WEXITSTATUS) and captured output.
struct ProcessOutput {
  int status = -1;
  std::string out;
  std::string err;
};

// A user to run the child as: no supplementary groups, then `gid`, then `uid`.
struct RunAsUser {
  uid_t uid = 0;
  gid_t gid = 0;
};

struct SubprocessOptions {
  // "NAME=value" entries: added to this process's environment (replacing the same names), or,
  // with exact_env, the whole environment. Spawn() only.
  std::vector<std::string> env;
  bool exact_env = false;
  bool pipe_stdin = false;      // WriteLine(), CloseStdin(); else this process's stdin
  bool capture_stdout = false;  // ReadLine(), ReadToEnd(), Finish()
  bool capture_stderr = false;  // StderrSoFar(), Finish()
  int stdout_fd = -1;           // borrowed: the child's stdout when not captured (-1: ours)
  int stderr_fd = -1;           // borrowed: the child's stderr when not captured (-1: ours)
  std::optional<RunAsUser> run_as;
  std::string working_dir;  // "": this process's
  // PR_SET_PDEATHSIG: the child gets this signal when the test process dies (0: none); a
  // child whose parent is already gone exits 127 at once.
  int death_signal = 0;
  std::optional<cpu_set_t> cpu_affinity;
};

class Subprocess {
 public:
  // Runs `argv` (argv[0] a path). A child that fails a setup step exits 126; exec, 127.
  static absl::StatusOr<Subprocess> Spawn(const std::vector<std::string>& argv,
                                          const SubprocessOptions& options = {});
  // Runs `body` in a forked child, which _exit()s with its result (setup failure: 126).
  static absl::StatusOr<Subprocess> Fork(const std::function<int()>& body,
                                         const SubprocessOptions& options = {});

  Subprocess() = default;  // no child: a place to move one into
  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&& other) noexcept;
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  ~Subprocess();

  // The child's pid; -1 once it has been reaped.
  pid_t pid() const { return reaped_ ? -1 : pid_; }
  // Sends `signal` unless the child was reaped (no wait).
  void Signal(int signal);
  // Its wait status once it has exited (reaping it; later calls repeat it), else nullopt.
  std::optional<int> ExitStatus();
  // Waits for it to exit and returns its wait status. After `timeout` (a guard against hangs,
  // never a measurement) it is SIGKILLed and reaped: DEADLINE_EXCEEDED.
  absl::StatusOr<int> Wait(absl::Duration timeout = absl::InfiniteDuration());
  // Signal(signal), then Wait(timeout).
  absl::StatusOr<int> Stop(int signal, absl::Duration timeout);
  // The caller reaped it itself (waitpid on pid()): nothing is left to kill or reap.
  void MarkReaped() { reaped_ = true; }

  // pipe_stdin: writes `line` and a newline; closes the child's stdin.
  absl::Status WriteLine(const std::string& line);
  void CloseStdin() { stdin_.reset(); }
  // capture_stdout: the next line without its newline. FAILED_PRECONDITION at the end of its
  // output, DEADLINE_EXCEEDED when no whole line came within `timeout`.
  absl::StatusOr<std::string> ReadLine(absl::Duration timeout = absl::InfiniteDuration());
  // capture_stdout: everything not yet returned, up to the end of its output.
  absl::StatusOr<std::string> ReadToEnd(absl::Duration timeout = absl::InfiniteDuration());
  // capture_stderr: what it wrote to stderr so far, read without waiting (not consumed).
  std::string StderrSoFar();
  // Reads the captured streams to their end (each "" when not captured), then reaps it. After
  // `timeout` it is SIGKILLed and reaped: DEADLINE_EXCEEDED.
  absl::StatusOr<ProcessOutput> Finish(absl::Duration timeout = absl::InfiniteDuration());

 private:
  static absl::StatusOr<Subprocess> Start(const std::vector<std::string>* argv,
                                          const std::function<int()>* body,
                                          const SubprocessOptions& options);
  void KillAndReap();
  // One read from the captured stream `which` (1 or 2) into its buffer, waiting at most
  // `wait_ms`: bytes read, 0 at its end, -1 when nothing came (or on an error: see errno).
  int ReadSome(int which, int wait_ms);

  pid_t pid_ = -1;
  bool reaped_ = true;
  int status_ = -1;  // the wait status once reaped_
  UniqueFd stdin_;   // the parent's ends
  UniqueFd stdout_;
  UniqueFd stderr_;
  std::string out_;  // read from stdout_, not yet returned
  std::string err_;  // read from stderr_
};

// "exited with status 3", "killed by signal 9 (Killed)", for a wait status.
std::string DescribeWaitStatus(int status);

}  // namespace tensorbroker::testing

#endif  // TENSORBROKER_TESTS_SUPPORT_SUBPROCESS_H_
