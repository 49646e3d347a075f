#include "daemon/instance_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tensorbroker::daemon {

absl::StatusOr<InstanceLock> InstanceLock::Acquire(const std::string& socket_path) {
  const std::string lock_path = socket_path + ".lock";
  InstanceLock lock;
  lock.fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock.fd_ < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("--socket: cannot open lock file ", lock_path, ": ", std::strerror(errno)));
  }
  if (::flock(lock.fd_, LOCK_EX | LOCK_NB) != 0) {
    char pid[32] = {};
    const ssize_t n = ::pread(lock.fd_, pid, sizeof(pid) - 1, 0);
    return absl::FailedPreconditionError(absl::StrCat(
        "--socket ", socket_path, " is served by another tensorbrokerd",
        n > 0 ? absl::StrCat(" (pid ", std::string(pid, static_cast<size_t>(n)), ")") : "",
        "; stop it or choose another --socket"));
  }
  const std::string pid = std::to_string(::getpid());
  if (::ftruncate(lock.fd_, 0) != 0 || ::pwrite(lock.fd_, pid.data(), pid.size(), 0) < 0) {
    // The pid is informative only; the lock itself is held.
  }
  // The lock is ours, so a socket file there is stale, unless the service manager holds it
  // (socket activation): binding replaces it (unix_listener.h) when it is not handed over.
  return lock;
}

absl::StatusOr<InstanceLock> InstanceLock::Adopt(const std::string& socket_path, UniqueFd fd) {
  const std::string lock_path = socket_path + ".lock";
  struct stat handed {}, named {};
  if (!fd.valid() || ::fstat(fd.get(), &handed) != 0 || ::stat(lock_path.c_str(), &named) != 0 ||
      handed.st_dev != named.st_dev || handed.st_ino != named.st_ino) {
    return absl::FailedPreconditionError(
        absl::StrCat("--takeover: the lock handed over is not ", lock_path));
  }
  // Succeeds at once on the open file that holds the lock; fails on any other.
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--takeover: the lock handed over does not hold ", lock_path));
  }
  InstanceLock lock;
  lock.fd_ = fd.release();
  const std::string pid = std::to_string(::getpid());
  if (::ftruncate(lock.fd_, 0) != 0 || ::pwrite(lock.fd_, pid.data(), pid.size(), 0) < 0) {
    // The pid is informative only.
  }
  return lock;
}

InstanceLock::InstanceLock(InstanceLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

InstanceLock& InstanceLock::operator=(InstanceLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

InstanceLock::~InstanceLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace tensorbroker::daemon
