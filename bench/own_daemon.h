// OwnDaemon: a tensorbrokerd the bench starts (a testing::Subprocess, its stdout and stderr in
// a log file) on a temporary socket and stops with SIGTERM.
// It owns the child process and its temporary directory (removed in the destructor). Use it
// from one thread (main()'s).
#ifndef TENSORBROKER_BENCH_OWN_DAEMON_H_
#define TENSORBROKER_BENCH_OWN_DAEMON_H_

#include <sys/types.h>

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "tests/support/subprocess.h"

namespace tensorbroker::bench {

class OwnDaemon {
 public:
  OwnDaemon() = default;
  OwnDaemon(const OwnDaemon&) = delete;
  OwnDaemon& operator=(const OwnDaemon&) = delete;
  ~OwnDaemon();

  // Starts `binary --socket <tmp>/broker.sock --capacity <capacity>` (pinned to `pin_cpu`, or
  // floating when < 0) and waits until it answers Ping (testing::WaitForDaemon: up to 30 s, and
  // at once, with its exit status and log, when it exits first).
  absl::Status Start(const std::string& binary, const std::string& capacity, int pin_cpu);

  // SIGTERM, wait up to 10 s, then SIGKILL. Returns a description of how it ended.
  std::string Stop();

  bool clean_exit() const { return clean_exit_; }
  const std::string& socket() const { return socket_; }
  pid_t pid() const { return process_.pid(); }

  // The last `max_lines` lines of the daemon's log, each prefixed with "  | ".
  std::string LogTail(size_t max_lines = 30) const;

  // "exit code N", "killed by signal S", ... for a waitpid status.
  static std::string DescribeStatus(int status);

 private:
  testing::Subprocess process_;  // tests/support/subprocess.h
  bool clean_exit_ = false;
  std::string dir_, socket_, log_;
};

}  // namespace tensorbroker::bench

#endif  // TENSORBROKER_BENCH_OWN_DAEMON_H_
