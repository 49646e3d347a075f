#include "daemon/app/instance_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/user_names.h"
#include "daemon/base/log.h"
#include "daemon/net/socket_holder.h"

namespace tensorbroker::daemon {
namespace {

constexpr mode_t kLockFileMode = 0644;  // readable by all: any daemon can tell who holds it

absl::Status CannotUse(const std::string& lock_path, absl::string_view what, int error) {
  return absl::PermissionDeniedError(absl::StrCat("--socket: cannot ", what, " lock file ",
                                                  lock_path, ": ", std::strerror(error)));
}

// The pid written in the lock file; nothing when it holds none.
std::optional<pid_t> WrittenPid(int fd) {
  char text[32] = {};
  const ssize_t n = ::pread(fd, text, sizeof(text) - 1, 0);
  int pid = 0;
  if (n <= 0 || !absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &pid) || pid <= 0) {
    return std::nullopt;
  }
  return static_cast<pid_t>(pid);
}

void WritePid(int fd) {
  const std::string pid = std::to_string(::getpid());
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    // The pid is informative only (who holds it); the lock itself is held.
  }
}

// Whether `fd` is still the file at `path`: a daemon that replaced a stale file took the name
// for another inode, whose lock is the one that counts.
bool StillAt(int fd, const std::string& path) {
  struct stat opened {
  }, named{};
  return ::fstat(fd, &opened) == 0 && ::lstat(path.c_str(), &named) == 0 &&
         opened.st_dev == named.st_dev && opened.st_ino == named.st_ino;
}

absl::Status HeldBy(const std::string& socket_path, pid_t pid) {
  const ProcessView holder = ViewProcess(pid);
  return absl::FailedPreconditionError(absl::StrCat(
      "--socket ", socket_path, " is served by another tensorbrokerd: ", DescribeProcess(holder),
      "; ", HowToStop(holder), ", or choose another --socket"));
}

std::string LeftBy(const struct stat& file, std::optional<pid_t> pid) {
  return absl::StrCat(DescribeUid(file.st_uid),
                      pid.has_value() ? absl::StrCat(", pid ", *pid) : std::string(),
                      ", which no longer holds it");
}

// Puts a locked lock file of this daemon's, with its pid, at `lock_path` in one step (rename),
// in place of a stale one this uid may not write: there is never a moment without a file there.
absl::StatusOr<UniqueFd> ReplaceStale(const std::string& lock_path) {
  const std::string fresh = absl::StrCat(lock_path, ".", ::getpid(), ".new");
  ::unlink(fresh.c_str());  // a leftover of this pid's, long dead
  UniqueFd fd(
      ::open(fresh.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, kLockFileMode));
  if (!fd.valid()) return CannotUse(lock_path, "replace the stale", errno);
  if (::fchmod(fd.get(), kLockFileMode) == 0 && ::flock(fd.get(), LOCK_EX | LOCK_NB) == 0) {
    WritePid(fd.get());
    if (::rename(fresh.c_str(), lock_path.c_str()) == 0) return fd;
  }
  const int error = errno;
  ::unlink(fresh.c_str());
  return CannotUse(lock_path, "replace the stale", error);
}

// An attempt on the file at `lock_path`: the lock, a refusal, or nothing when the file was
// replaced meanwhile (try again).
absl::StatusOr<std::optional<UniqueFd>> TryLock(const std::string& socket_path,
                                                const std::string& lock_path) {
  bool writable = true;
  UniqueFd fd(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
                     kLockFileMode));
  if (!fd.valid() && errno == EACCES) {  // another user's file
    writable = false;
    fd.reset(::open(lock_path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  }
  struct stat file {};
  if (!fd.valid() && errno == EACCES && ::lstat(lock_path.c_str(), &file) == 0) {
    // Unreadable too (mode 0600, as versions before 0644 made it): /proc/locks says whether a
    // live daemon holds it. Replacing it cannot hold its lock meanwhile, unlike below; two
    // daemons starting in the same instant could both go on, which only this legacy file allows.
    if (std::optional<pid_t> holder = FlockHolder(file.st_dev, file.st_ino)) {
      return HeldBy(socket_path, *holder);
    }
    auto replaced = ReplaceStale(lock_path);
    if (!replaced.ok()) return replaced.status();
    Log(LogLevel::kNotice, "replaced the lock file ", lock_path, " left behind by ",
        LeftBy(file, std::nullopt));
    return std::optional<UniqueFd>(*std::move(replaced));
  }
  if (!fd.valid()) return CannotUse(lock_path, "open", errno);
  if (::fstat(fd.get(), &file) != 0) return CannotUse(lock_path, "stat", errno);
  if (!S_ISREG(file.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("--socket: lock file ", lock_path, " is not a regular file; remove it"));
  }
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) return CannotUse(lock_path, "lock", errno);
    if (!StillAt(fd.get(), lock_path)) return std::optional<UniqueFd>();
    std::optional<pid_t> holder = WrittenPid(fd.get());
    if (!holder.has_value()) holder = FlockHolder(file.st_dev, file.st_ino);
    if (!holder.has_value()) holder = 0;
    return HeldBy(socket_path, *holder);
  }
  if (!StillAt(fd.get(), lock_path)) return std::optional<UniqueFd>();
  const std::optional<pid_t> previous = WrittenPid(fd.get());
  if (!writable) {
    // Held here while it is replaced: a daemon that opened it meanwhile finds it locked, then
    // finds the name taken by the new file (StillAt) and tries that one.
    auto replaced = ReplaceStale(lock_path);
    if (!replaced.ok()) return replaced.status();
    Log(LogLevel::kNotice, "replaced the lock file ", lock_path, " left behind by ",
        LeftBy(file, previous));
    return std::optional<UniqueFd>(*std::move(replaced));
  }
  if (file.st_uid == ::geteuid()) (void)::fchmod(fd.get(), kLockFileMode);  // 0600 before
  WritePid(fd.get());
  if (previous.has_value() && *previous != ::getpid()) {
    Log(LogLevel::kInfo, "took over the lock file ", lock_path, " left behind by ",
        LeftBy(file, previous));
  }
  return std::optional<UniqueFd>(std::move(fd));
}

}  // namespace

absl::StatusOr<InstanceLock> InstanceLock::Acquire(const std::string& socket_path) {
  const std::string lock_path = socket_path + ".lock";
  // Each retry follows a replacement by another daemon starting at the same moment; more than a
  // few in a row would be a file replaced in a loop.
  for (int attempt = 0; attempt < 16; ++attempt) {
    auto locked = TryLock(socket_path, lock_path);
    if (!locked.ok()) return locked.status();
    // The lock is ours, so a socket file there is stale, unless the service manager holds it
    // (socket activation): unix_listener.h checks that nobody listens before it replaces one.
    if (locked->has_value()) return InstanceLock(**std::move(locked));
  }
  return absl::UnavailableError(
      absl::StrCat("--socket: lock file ", lock_path, " keeps being replaced; try again"));
}

absl::StatusOr<InstanceLock> InstanceLock::Adopt(const std::string& socket_path, UniqueFd fd) {
  const std::string lock_path = socket_path + ".lock";
  if (!fd.valid() || !StillAt(fd.get(), lock_path)) {
    return absl::FailedPreconditionError(
        absl::StrCat("--takeover: the lock handed over is not ", lock_path));
  }
  // Succeeds at once on the open file that holds the lock (or on any, when none holds it);
  // fails while another open file holds it.
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--takeover: the lock handed over does not hold ", lock_path));
  }
  WritePid(fd.get());
  return InstanceLock(std::move(fd));
}

}  // namespace tensorbroker::daemon
