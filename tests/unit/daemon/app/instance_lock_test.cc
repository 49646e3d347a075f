// One daemon per socket path (daemon/app/instance_lock.h), on real files in a temporary directory:
// Acquire makes "<socket>.lock" (mode 0644, this pid in it) and holds its flock; another live
// holder, in this process or in a real second one (fork), is refused with FAILED_PRECONDITION
// naming it and how to stop it; a lock left by a process that died or let go is taken over (and
// that is logged); the lock goes with the InstanceLock's life and its moves; a lock path that is
// a symlink, a directory or a FIFO is refused, untouched; Adopt takes the open file that holds
// the lock, in this process or another, and refuses any other. Lock files of another user (the
// cases a daemon of another uid meets) need two uids: tests/integration/socket_ownership_test.cc.
#include "daemon/app/instance_lock.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/unique_fd.h"
#include "common/user_names.h"
#include "daemon/base/log.h"
#include "daemon/net/socket_holder.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace tensorbroker::daemon {
namespace {

using ::tensorbroker::testing::TempDir;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The message Acquire gives when `holder` holds the lock of `socket_path`.
std::string HeldByMessage(const std::string& socket_path, pid_t holder) {
  const ProcessView view = ViewProcess(holder);
  return absl::StrCat("--socket ", socket_path,
                      " is served by another tensorbrokerd: ", DescribeProcess(view), "; ",
                      HowToStop(view), ", or choose another --socket");
}

// Whether some open file of `path` other than the lock's could flock it now (it is free).
bool LockIsFree(const std::string& path) {
  UniqueFd probe(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  EXPECT_TRUE(probe.valid()) << path;
  if (!probe.valid()) return false;
  if (::flock(probe.get(), LOCK_EX | LOCK_NB) == 0) return true;  // released with `probe`
  EXPECT_EQ(errno, EWOULDBLOCK);
  return false;
}

// A real second process (testing::Subprocess::Fork) that runs `act` and then stays until
// Release() or Kill(); it dies with the test process (PR_SET_PDEATHSIG, and EOF on its stdin).
// `act` says whether it succeeded (a line on its stdout); it runs in the child only, which never
// returns into the test. The Subprocess kills and reaps a child still there, so a failed
// assertion leaves nothing behind.
class SecondProcess {
 public:
  explicit SecondProcess(const std::function<bool()>& act) {
    testing::SubprocessOptions options;
    options.pipe_stdin = true;  // held open until Release()
    options.capture_stdout = true;
    options.death_signal = SIGKILL;
    auto child = testing::Subprocess::Fork(
        [&]() -> int {
          const char* answer = act() ? "y\n" : "n\n";
          if (::write(STDOUT_FILENO, answer, 2) != 2) return 4;
          char byte = 0;
          while (::read(STDIN_FILENO, &byte, 1) != 0) {
          }
          return 0;
        },
        options);
    if (!child.ok()) {
      ADD_FAILURE() << child.status();
      return;
    }
    process_ = *std::move(child);
    succeeded_ = process_.ReadLine().value_or("") == "y";
  }
  SecondProcess(const SecondProcess&) = delete;
  SecondProcess& operator=(const SecondProcess&) = delete;

  pid_t pid() const { return process_.pid(); }
  // Whether `act` succeeded in it.
  bool succeeded() const { return succeeded_; }
  // Lets it exit (its descriptors close) and reaps it.
  void Release() {
    process_.CloseStdin();
    (void)process_.Wait();
  }
  // SIGKILL, then reaps it: a daemon that died.
  void Kill() { (void)process_.Stop(SIGKILL, absl::InfiniteDuration()); }

 private:
  testing::Subprocess process_;
  bool succeeded_ = false;
};

// For a SecondProcess: acquires the lock of `socket_path` and keeps it for the child's life.
bool AcquireAndKeep(const std::string& socket_path) {
  static absl::StatusOr<InstanceLock>* kept = nullptr;
  kept = new absl::StatusOr<InstanceLock>(InstanceLock::Acquire(socket_path));
  return kept->ok();
}

// For a SecondProcess: adopts `fd` as the lock of `socket_path` and keeps it for the child's life.
bool AdoptAndKeep(const std::string& socket_path, int fd) {
  static absl::StatusOr<InstanceLock>* kept = nullptr;
  kept = new absl::StatusOr<InstanceLock>(InstanceLock::Adopt(socket_path, UniqueFd(fd)));
  return kept->ok();
}

class InstanceLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    previous_level_ = CurrentLogLevel();
    SetLogLevel(LogLevel::kInfo);
  }
  void TearDown() override { SetLogLevel(previous_level_); }

  TempDir dir_{"tblock"};
  const std::string socket_ = dir_.path() + "/broker.sock";
  const std::string lock_path_ = socket_ + ".lock";
  LogLevel previous_level_ = LogLevel::kInfo;
};

TEST_F(InstanceLockTest, AcquireMakesALockFileOfMode0644WithThisPidAndHoldsItsLock) {
  absl::StatusOr<InstanceLock> lock = InstanceLock::Acquire(socket_);
  ASSERT_TRUE(lock.ok()) << lock.status();
  struct stat file {};
  ASSERT_EQ(::lstat(lock_path_.c_str(), &file), 0);
  EXPECT_TRUE(S_ISREG(file.st_mode));
  EXPECT_EQ(file.st_mode & 07777, 0644u);
  EXPECT_EQ(ReadFile(lock_path_), std::to_string(::getpid()));
  // fd() is that file, and holds its lock.
  struct stat held {};
  ASSERT_EQ(::fstat(lock->fd(), &held), 0);
  EXPECT_EQ(held.st_ino, file.st_ino);
  EXPECT_EQ(held.st_dev, file.st_dev);
  EXPECT_FALSE(LockIsFree(lock_path_));
  // Nothing else is made: no socket file, no leftovers.
  EXPECT_FALSE(std::filesystem::exists(socket_));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_.path()),
                          std::filesystem::directory_iterator()),
            1);
}

TEST_F(InstanceLockTest, AnUnheldLockFileOfThisUserIsTakenOverAndMadeReadableByAll) {
  // Left by an earlier version (mode 0600) or a daemon that died before writing a pid.
  for (const std::string contents : {"", "not a pid\n", "0", "-5"}) {
    SCOPED_TRACE(contents);
    {
      UniqueFd old(::open(lock_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
      ASSERT_TRUE(old.valid());
      ASSERT_EQ(::fchmod(old.get(), 0600), 0);
      ASSERT_EQ(::write(old.get(), contents.data(), contents.size()),
                static_cast<ssize_t>(contents.size()));
    }
    absl::StatusOr<InstanceLock> lock = InstanceLock::Acquire(socket_);
    ASSERT_TRUE(lock.ok()) << lock.status();
    EXPECT_EQ(ReadFile(lock_path_), std::to_string(::getpid()));
    struct stat file {};
    ASSERT_EQ(::stat(lock_path_.c_str(), &file), 0);
    EXPECT_EQ(file.st_mode & 07777, 0644u);
  }
}

TEST_F(InstanceLockTest, ASecondAcquireWhileThisProcessHoldsItIsRefusedNamingThisProcess) {
  absl::StatusOr<InstanceLock> lock = InstanceLock::Acquire(socket_);
  ASSERT_TRUE(lock.ok()) << lock.status();
  const absl::StatusOr<InstanceLock> second = InstanceLock::Acquire(socket_);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(second.status().message(), HeldByMessage(socket_, ::getpid()));
  EXPECT_FALSE(LockIsFree(lock_path_));  // the refusal let go of nothing
}

TEST_F(InstanceLockTest, ALockHeldByAnotherProcessIsRefusedNamingItAndHowToStopIt) {
  SecondProcess other([&] { return AcquireAndKeep(socket_); });
  ASSERT_TRUE(other.succeeded());
  ASSERT_EQ(ReadFile(lock_path_), std::to_string(other.pid()));

  const absl::StatusOr<InstanceLock> lock = InstanceLock::Acquire(socket_);
  ASSERT_FALSE(lock.ok());
  EXPECT_EQ(lock.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(lock.status().message(), HeldByMessage(socket_, other.pid()));
  EXPECT_TRUE(absl::StrContains(lock.status().message(), absl::StrCat("pid ", other.pid(), " ")))
      << lock.status();
  // The holder's file is left as it was.
  EXPECT_EQ(ReadFile(lock_path_), std::to_string(other.pid()));
}

TEST_F(InstanceLockTest, ALockLeftByAProcessThatDiedIsTakenOverAndThatIsLogged) {
  SecondProcess other([&] { return AcquireAndKeep(socket_); });
  ASSERT_TRUE(other.succeeded());
  const pid_t dead = other.pid();
  other.Kill();  // no clean-up of its own: the kernel drops the flock, the file stays

  ::testing::internal::CaptureStderr();
  absl::StatusOr<InstanceLock> lock = InstanceLock::Acquire(socket_);
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(lock.ok()) << lock.status();
  EXPECT_EQ(ReadFile(lock_path_), std::to_string(::getpid()));
  EXPECT_FALSE(LockIsFree(lock_path_));
  EXPECT_TRUE(absl::StrContains(
      log, absl::StrCat("took over the lock file ", lock_path_, " left behind by ",
                        DescribeUid(::geteuid()), ", pid ", dead, ", which no longer holds it")))
      << log;
}

TEST_F(InstanceLockTest, ALockLetGoByAnotherProcessCanBeAcquired) {
  SecondProcess other([&] { return AcquireAndKeep(socket_); });
  ASSERT_TRUE(other.succeeded());
  other.Release();
  absl::StatusOr<InstanceLock> lock = InstanceLock::Acquire(socket_);
  ASSERT_TRUE(lock.ok()) << lock.status();
  EXPECT_EQ(ReadFile(lock_path_), std::to_string(::getpid()));
}

TEST_F(InstanceLockTest, TheLockLastsAsLongAsTheInstanceLockWhereverItIsMoved) {
  std::optional<InstanceLock> moved;
  {
    absl::StatusOr<InstanceLock> lock = InstanceLock::Acquire(socket_);
    ASSERT_TRUE(lock.ok()) << lock.status();
    const int fd = lock->fd();
    moved.emplace(*std::move(lock));
    EXPECT_EQ(moved->fd(), fd);
  }  // the moved-from one goes: nothing is released
  EXPECT_FALSE(LockIsFree(lock_path_));
  EXPECT_EQ(InstanceLock::Acquire(socket_).status().code(), absl::StatusCode::kFailedPrecondition);

  absl::StatusOr<InstanceLock> assigned = InstanceLock::Acquire(dir_.path() + "/other.sock");
  ASSERT_TRUE(assigned.ok()) << assigned.status();
  *assigned = *std::move(moved);  // releases other.sock's lock, takes broker.sock's
  moved.reset();
  EXPECT_TRUE(LockIsFree(dir_.path() + "/other.sock.lock"));
  EXPECT_FALSE(LockIsFree(lock_path_));

  assigned = absl::UnknownError("gone");  // the destructor releases it
  EXPECT_TRUE(LockIsFree(lock_path_));
  EXPECT_TRUE(std::filesystem::exists(lock_path_));  // the file stays
  // Free for another process too.
  SecondProcess other([&] { return AcquireAndKeep(socket_); });
  EXPECT_TRUE(other.succeeded());
}

TEST_F(InstanceLockTest, ALockPathThatIsASymlinkIsNotFollowed) {
  const std::string target = dir_.path() + "/target";
  ASSERT_EQ(::symlink(target.c_str(), lock_path_.c_str()), 0);
  const absl::StatusOr<InstanceLock> dangling = InstanceLock::Acquire(socket_);
  ASSERT_FALSE(dangling.ok());
  EXPECT_EQ(dangling.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(absl::StartsWith(dangling.status().message(),
                               absl::StrCat("--socket: cannot open lock file ", lock_path_, ": ")))
      << dangling.status();
  EXPECT_FALSE(std::filesystem::exists(target));  // not made through the link

  { std::ofstream(target) << "someone's data"; }
  const absl::StatusOr<InstanceLock> existing = InstanceLock::Acquire(socket_);
  EXPECT_EQ(existing.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ReadFile(target), "someone's data");
  EXPECT_TRUE(std::filesystem::is_symlink(lock_path_));
}

TEST_F(InstanceLockTest, ALockPathThatIsADirectoryIsRefusedAndLeft) {
  ASSERT_EQ(::mkdir(lock_path_.c_str(), 0755), 0);
  const absl::StatusOr<InstanceLock> lock = InstanceLock::Acquire(socket_);
  ASSERT_FALSE(lock.ok());
  EXPECT_EQ(lock.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(absl::StartsWith(lock.status().message(),
                               absl::StrCat("--socket: cannot open lock file ", lock_path_, ": ")))
      << lock.status();
  EXPECT_TRUE(std::filesystem::is_directory(lock_path_));
}

TEST_F(InstanceLockTest, ALockPathThatIsAFifoIsRefusedAndLeft) {
  ASSERT_EQ(::mkfifo(lock_path_.c_str(), 0644), 0);
  const absl::StatusOr<InstanceLock> lock = InstanceLock::Acquire(socket_);
  ASSERT_FALSE(lock.ok());
  EXPECT_EQ(lock.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(lock.status().message(),
            absl::StrCat("--socket: lock file ", lock_path_, " is not a regular file; remove it"));
  EXPECT_TRUE(std::filesystem::is_fifo(lock_path_));
}

TEST_F(InstanceLockTest, AdoptTakesTheOpenFileThatHoldsTheLock) {
  absl::StatusOr<InstanceLock> original = InstanceLock::Acquire(socket_);
  ASSERT_TRUE(original.ok()) << original.status();
  // A duplicate is the same open file, so it holds the same lock (as one passed over a socket).
  UniqueFd handed(::fcntl(original->fd(), F_DUPFD_CLOEXEC, 0));
  ASSERT_TRUE(handed.valid());
  absl::StatusOr<InstanceLock> adopted = InstanceLock::Adopt(socket_, std::move(handed));
  ASSERT_TRUE(adopted.ok()) << adopted.status();
  original = absl::UnknownError("gone");  // the old owner's descriptor closes
  EXPECT_FALSE(LockIsFree(lock_path_));
  EXPECT_EQ(InstanceLock::Acquire(socket_).status().code(), absl::StatusCode::kFailedPrecondition);
  adopted = absl::UnknownError("gone");
  EXPECT_TRUE(LockIsFree(lock_path_));
}

TEST_F(InstanceLockTest, AnotherProcessAdoptsTheLockAndIsThenItsHolder) {
  absl::StatusOr<InstanceLock> original = InstanceLock::Acquire(socket_);
  ASSERT_TRUE(original.ok()) << original.status();
  const int inherited = original->fd();  // the child has the same open file at the same number
  SecondProcess successor([&] { return AdoptAndKeep(socket_, inherited); });
  ASSERT_TRUE(successor.succeeded());
  original = absl::UnknownError("gone");  // the predecessor exits

  const absl::StatusOr<InstanceLock> lock = InstanceLock::Acquire(socket_);
  ASSERT_FALSE(lock.ok());
  EXPECT_EQ(lock.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(lock.status().message(), HeldByMessage(socket_, successor.pid()));

  successor.Release();
  EXPECT_TRUE(InstanceLock::Acquire(socket_).ok());
}

TEST_F(InstanceLockTest, AdoptRefusesADescriptorThatIsNotTheLockFile) {
  const std::string refusal = absl::StrCat("--takeover: the lock handed over is not ", lock_path_);
  const absl::StatusOr<InstanceLock> none = InstanceLock::Adopt(socket_, UniqueFd());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(none.status().message(), refusal);

  // Another file, even one that holds a flock.
  const std::string other = dir_.path() + "/other";
  UniqueFd other_fd(::open(other.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  ASSERT_TRUE(other_fd.valid());
  ASSERT_EQ(::flock(other_fd.get(), LOCK_EX | LOCK_NB), 0);
  const absl::StatusOr<InstanceLock> wrong = InstanceLock::Adopt(socket_, std::move(other_fd));
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(wrong.status().message(), refusal);

  // The file that was the lock file before another took its name.
  absl::StatusOr<InstanceLock> old = InstanceLock::Acquire(socket_);
  ASSERT_TRUE(old.ok()) << old.status();
  UniqueFd old_fd(::fcntl(old->fd(), F_DUPFD_CLOEXEC, 0));
  ASSERT_TRUE(old_fd.valid());
  ASSERT_EQ(::rename(lock_path_.c_str(), (dir_.path() + "/moved.lock").c_str()), 0);
  {
    UniqueFd fresh(::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    ASSERT_TRUE(fresh.valid());
  }
  const absl::StatusOr<InstanceLock> replaced = InstanceLock::Adopt(socket_, std::move(old_fd));
  EXPECT_EQ(replaced.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(replaced.status().message(), refusal);
}

TEST_F(InstanceLockTest, AdoptRefusesAnOpenFileOfTheLockThatDoesNotHoldIt) {
  SecondProcess holder([&] { return AcquireAndKeep(socket_); });
  ASSERT_TRUE(holder.succeeded());
  UniqueFd fd(::open(lock_path_.c_str(), O_RDWR | O_CLOEXEC));
  ASSERT_TRUE(fd.valid());
  const absl::StatusOr<InstanceLock> lock = InstanceLock::Adopt(socket_, std::move(fd));
  ASSERT_FALSE(lock.ok());
  EXPECT_EQ(lock.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(lock.status().message(),
            absl::StrCat("--takeover: the lock handed over does not hold ", lock_path_));
  EXPECT_EQ(ReadFile(lock_path_), std::to_string(holder.pid()));  // not written over
}

}  // namespace
}  // namespace tensorbroker::daemon
