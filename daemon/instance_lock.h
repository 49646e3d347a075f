// Makes a socket path belong to one daemon at a time: an exclusive flock on "<socket>.lock",
// held for the daemon's life and released by the kernel if it dies. Whoever holds the lock may
// replace a stale socket file and clean up what a dead predecessor left behind.
// Move-only; the destructor releases the lock (the lock file stays, harmlessly: removing it
// would let two daemons lock different files of the same name).
#ifndef TENSORBROKER_DAEMON_INSTANCE_LOCK_H_
#define TENSORBROKER_DAEMON_INSTANCE_LOCK_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/unique_fd.h"

namespace tensorbroker::daemon {

class InstanceLock {
 public:
  // The socket's directory must exist and be checked already (socket_directory_setup.h).
  // FAILED_PRECONDITION if another live daemon holds the lock.
  static absl::StatusOr<InstanceLock> Acquire(const std::string& socket_path);
  // The lock a running daemon handed over (tensorbrokerd --takeover, handover.h): `fd` must be
  // an open file of "<socket>.lock" that holds its lock (a flock belongs to the open file, so
  // it passes with the descriptor). FAILED_PRECONDITION otherwise.
  static absl::StatusOr<InstanceLock> Adopt(const std::string& socket_path, UniqueFd fd);
  // The lock file, for handing it over.
  int fd() const { return fd_; }

  InstanceLock(InstanceLock&& other) noexcept;
  InstanceLock& operator=(InstanceLock&& other) noexcept;
  InstanceLock(const InstanceLock&) = delete;
  InstanceLock& operator=(const InstanceLock&) = delete;
  ~InstanceLock();

 private:
  InstanceLock() = default;
  int fd_ = -1;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_INSTANCE_LOCK_H_
