// Makes a socket path belong to one daemon at a time: an exclusive flock on "<socket>.lock",
// held for the daemon's life and released by the kernel if it dies. Whoever holds the lock may
// replace a stale socket file and clean up what a dead predecessor left behind.
//
// The lock file is mode 0644 and holds the pid of the daemon that locked it, so that any daemon,
// whatever its uid, can tell the two cases apart (flock works on a read-only descriptor):
//   - held: another daemon is alive; Acquire refuses, naming it (pid, command, user, systemd
//     unit) and how to stop it;
//   - not held: it was left behind (a daemon stopped or died); Acquire takes it over and logs
//     that. A file left by another user (the quick start run as root, then the packaged service
//     as user tensorbroker) that this uid may not write is replaced by a file of its own, which
//     the directory's rules (socket_directory.h) allow. An unreadable one (mode 0600, written
//     by versions before 0644) is judged by /proc/locks instead.
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
  // FAILED_PRECONDITION if another live daemon holds the lock, with a message naming it and how
  // to stop it; PERMISSION_DENIED when the lock file can neither be opened nor replaced.
  static absl::StatusOr<InstanceLock> Acquire(const std::string& socket_path);
  // The lock a running daemon handed over (tensorbrokerd --takeover, handover.h): `fd` must be
  // an open file of "<socket>.lock" that holds its lock (a flock belongs to the open file, so
  // it passes with the descriptor), or that can take it (nobody holds it: the handing daemon
  // died meanwhile). FAILED_PRECONDITION for another file, or while another open file holds it.
  static absl::StatusOr<InstanceLock> Adopt(const std::string& socket_path, UniqueFd fd);
  // The lock file, for handing it over.
  int fd() const { return fd_.get(); }

  InstanceLock(InstanceLock&&) noexcept = default;
  InstanceLock& operator=(InstanceLock&&) noexcept = default;
  InstanceLock(const InstanceLock&) = delete;
  InstanceLock& operator=(const InstanceLock&) = delete;

 private:
  explicit InstanceLock(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_INSTANCE_LOCK_H_
