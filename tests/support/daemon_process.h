// Runs the real tensorbrokerd binary as a child process on a private temporary socket, for
// tests and benchmarks. The destructor stops it (SIGTERM, then SIGKILL after 30 s) and removes
// the temporary directory. Not thread-safe; one owner.
//
// The daemon's stderr goes through a DaemonLog (daemon_log.h): still shown on this process's
// stderr as it comes, and kept, so that Log() and a failed start quote it. Start() waits with
// WaitForDaemon (daemon_wait.h): up to 30 s, and a daemon that exits on its way up fails it at
// once, with its exit status and the end of its log.
//
// Fork safety: Start() runs it with Subprocess::Spawn (subprocess.h: fork and at once exec),
// so it is safe even when the calling process already runs gRPC threads. It gets SIGTERM when
// the test process dies.
#ifndef TENSORBROKER_TESTS_SUPPORT_DAEMON_PROCESS_H_
#define TENSORBROKER_TESTS_SUPPORT_DAEMON_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tests/support/daemon_log.h"
#include "tests/support/subprocess.h"

namespace tensorbroker::testing {

// Path of the tensorbrokerd binary under test: $TENSORBROKERD, else the build tree's.
std::string DaemonBinaryPath();

class DaemonProcess {
 public:
  // Starts `tensorbrokerd --socket <tmp>/broker.sock <extra_args...>` and waits until it
  // answers Ping (WaitForDaemon: up to kDaemonWaitDeadline; at once when it exits).
  // `launcher`, when given, comes first on the command line and must exec the rest in the same
  // process (e.g. `unshare --mount sh -c '... && exec "$@"' sh`): its pid is the daemon's.
  static absl::StatusOr<DaemonProcess> Start(std::vector<std::string> extra_args = {},
                                             const std::vector<std::string>& launcher = {});
  // Starts on a given socket path (does not own or remove its directory).
  static absl::StatusOr<DaemonProcess> StartOn(const std::string& socket_path,
                                               std::vector<std::string> extra_args = {},
                                               const std::vector<std::string>& launcher = {});

  DaemonProcess(DaemonProcess&& other) noexcept;
  DaemonProcess& operator=(DaemonProcess&& other) noexcept;
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;
  ~DaemonProcess();

  const std::string& socket_path() const { return socket_path_; }
  pid_t pid() const { return process_.pid(); }
  // What the daemon wrote to its stderr so far (its last DaemonLog::kKeptBytes); once it has
  // exited (Stop(), MarkReaped()), to the end.
  std::string Log() const;
  // Waits until Log() has `text` (lines reach it a moment after the daemon writes them);
  // NOT_FOUND quoting the log when `deadline` passes first (a guard: the line should come).
  absl::Status WaitForLogLine(const std::string& text,
                              absl::Duration deadline = absl::Seconds(30)) const;

  // Sends `signal` and waits for the process; returns its wait status (see WIFEXITED).
  absl::StatusOr<int> Stop(int signal = 15 /*SIGTERM*/);
  // The caller reaped the process (it exited on its own, e.g. after a takeover): nothing is
  // left to stop. Its directory is still removed with this object.
  void MarkReaped() { process_.MarkReaped(); }

 private:
  DaemonProcess() = default;
  Subprocess process_;
  std::string socket_path_;
  std::string owned_dir_;  // removed on destruction when not empty
  std::unique_ptr<DaemonLog> log_;
};

}  // namespace tensorbroker::testing

#endif  // TENSORBROKER_TESTS_SUPPORT_DAEMON_PROCESS_H_
