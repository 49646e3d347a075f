// Waiting for a tensorbrokerd that a test or bench started to reach a state (serving, READY=1,
// a log line), the one way every C++ test and bench does it: bounded in wall-clock time (a
// deadline, never a count of tries), and failing at once, with the daemon's exit status and the
// end of its log, when the daemon exits first. Plain functions of the calling thread; no state.
//
//   absl::Status s = WaitForDaemon(
//       {[&] { return ReapIfExited(pid); }, [&] { return ReadLogFile(log_path); }},
//       "serving on " + socket, [&] { return PingOn(socket); });
#ifndef TENSORBROKER_TESTS_SUPPORT_DAEMON_WAIT_H_
#define TENSORBROKER_TESTS_SUPPORT_DAEMON_WAIT_H_

#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace tensorbroker::testing {

// Against a daemon that hangs on its way up; never a measurement.
inline constexpr absl::Duration kDaemonWaitDeadline = absl::Seconds(30);
// How much of the daemon's log a failure message quotes.
inline constexpr size_t kQuotedLogLines = 100;

// What a wait watches besides the state it waits for.
struct WatchedDaemon {
  // The daemon's wait status once it has exited (reaping it, if it is our child), else nullopt.
  std::function<std::optional<int>()> exit_status;
  // The daemon's log (its stderr) so far.
  std::function<std::string()> log;
};

// Calls `reached` (OK: the state is reached; an error: not yet, and why) every `step` until it
// returns OK. Fails at once when the daemon has exited (INTERNAL: "tensorbrokerd exited (exit
// status 2) before it was <state>"), and when `deadline` has passed (DEADLINE_EXCEEDED: "... is
// not <state> after 30s", with the last answer of `reached`); either message quotes the last
// kQuotedLogLines lines of the log. `state` completes "it is ...": "serving on /tmp/b.sock".
absl::Status WaitForDaemon(const WatchedDaemon& daemon, absl::string_view state,
                           const std::function<absl::Status()>& reached,
                           absl::Duration deadline = kDaemonWaitDeadline,
                           absl::Duration step = absl::Milliseconds(20));

// For WatchedDaemon::exit_status: reaps our child `pid` if it has exited (nullopt for a pid
// <= 0, which waitpid would take for "any child").
std::optional<int> ReapIfExited(pid_t pid);
// For WatchedDaemon::log: the whole of the file at `path` ("" when it cannot be read).
std::string ReadLogFile(const std::string& path);
// For `reached`: OK when a daemon on `socket_path` answers Ping.
absl::Status PingOn(const std::string& socket_path);

// "exit status 2", "killed by signal 9 (Killed)", for a waitpid status.
std::string DescribeExit(int wait_status);
// The last `lines` lines of `text`, each prefixed with "  | ", or "  | (empty)\n".
std::string QuoteLastLines(absl::string_view text, size_t lines = kQuotedLogLines);

}  // namespace tensorbroker::testing

#endif  // TENSORBROKER_TESTS_SUPPORT_DAEMON_WAIT_H_
