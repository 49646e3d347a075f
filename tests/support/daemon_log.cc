#include "tests/support/daemon_log.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tensorbroker::testing {

absl::StatusOr<std::unique_ptr<DaemonLog>> DaemonLog::Create(int echo_fd) {
  int ends[2];
  if (::pipe2(ends, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", std::strerror(errno)));
  }
  UniqueFd read_end(ends[0]), write_end(ends[1]);
  UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) return absl::InternalError(absl::StrCat("eventfd: ", std::strerror(errno)));
  return std::unique_ptr<DaemonLog>(
      new DaemonLog(std::move(read_end), std::move(write_end), std::move(wake), echo_fd));
}

DaemonLog::DaemonLog(UniqueFd read_end, UniqueFd write_end, UniqueFd wake, int echo_fd)
    : read_end_(std::move(read_end)),
      write_end_(std::move(write_end)),
      wake_(std::move(wake)),
      echo_fd_(echo_fd) {
  reader_ = std::thread([this] { ReadLoop(); });
}

DaemonLog::~DaemonLog() {
  const uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof(one));
  reader_.join();
}

void DaemonLog::ReadLoop() {
  char buffer[4096];
  while (true) {
    pollfd fds[2] = {{read_end_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[1].revents != 0) return;  // stopped: the log may not have ended
    const ssize_t n = ::read(read_end_.get(), buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // every writer closed the pipe
    if (echo_fd_ >= 0) {
      for (ssize_t done = 0; done < n;) {
        const ssize_t written = ::write(echo_fd_, buffer + done, static_cast<size_t>(n - done));
        if (written < 0 && errno == EINTR) continue;
        if (written <= 0) break;
        done += written;
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    text_.append(buffer, static_cast<size_t>(n));
    if (text_.size() > kKeptBytes) text_.erase(0, text_.size() - kKeptBytes);
  }
  std::lock_guard<std::mutex> lock(mu_);
  ended_ = true;
  ended_changed_.notify_all();
}

std::string DaemonLog::Text() const {
  std::lock_guard<std::mutex> lock(mu_);
  return text_;
}

bool DaemonLog::WaitForEnd(absl::Duration timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return ended_changed_.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                                 [this] { return ended_; });
}

}  // namespace tensorbroker::testing
