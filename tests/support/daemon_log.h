// The stderr of a daemon a test or bench starts, kept for failure messages and still shown as
// it comes: a pipe whose write end the child gets as its descriptor 2, and a thread of this
// object that reads the other end until every writer has closed it, copies each chunk to this
// process's stderr (so the test's output reads as when the child inherited it) and keeps the
// last kKeptBytes for Text().
//
// Thread-safe. Fork safety: both ends are close-on-exec; the child dup2()s child_end() onto 2
// (async-signal-safe) and the parent then calls CloseChildEnd(), so that the log ends when the
// daemon exits. The destructor stops the reader at once, whether or not the log has ended.
#ifndef TENSORBROKER_TESTS_SUPPORT_DAEMON_LOG_H_
#define TENSORBROKER_TESTS_SUPPORT_DAEMON_LOG_H_

#include <unistd.h>

#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/unique_fd.h"

namespace tensorbroker::testing {

class DaemonLog {
 public:
  static constexpr size_t kKeptBytes = 256 << 10;

  // `echo_fd`: where every chunk read is copied too (borrowed; -1: nowhere).
  static absl::StatusOr<std::unique_ptr<DaemonLog>> Create(int echo_fd = STDERR_FILENO);
  DaemonLog(const DaemonLog&) = delete;
  DaemonLog& operator=(const DaemonLog&) = delete;
  ~DaemonLog();

  // The write end, for the child to dup2() onto its descriptor 2 between fork and exec.
  int child_end() const { return write_end_.get(); }
  // In the parent, once the child is started: closes this process's copy of the write end.
  void CloseChildEnd() { write_end_.reset(); }

  // What was read so far (the last kKeptBytes of it).
  std::string Text() const;
  // Waits until every writer has closed the pipe (the daemon exited) and all was read: true;
  // false when `timeout` passes first.
  bool WaitForEnd(absl::Duration timeout) const;

 private:
  DaemonLog(UniqueFd read_end, UniqueFd write_end, UniqueFd wake, int echo_fd);
  void ReadLoop();

  const UniqueFd read_end_;
  UniqueFd write_end_;
  const UniqueFd wake_;  // an eventfd that stops the reader
  const int echo_fd_;
  mutable std::mutex mu_;
  mutable std::condition_variable ended_changed_;
  std::string text_;    // guarded by mu_
  bool ended_ = false;  // guarded by mu_
  std::thread reader_;
};

}  // namespace tensorbroker::testing

#endif  // TENSORBROKER_TESTS_SUPPORT_DAEMON_LOG_H_
