// The CLI's look at the socket path before it connects (cli/socket_wait.h): which /proc/locks
// lines mean that a daemon holds a lock file, and how long a path that does not exist is waited
// for: a look and no more when nothing is starting there, up to the timeout while a daemon
// holds "<path>.lock".
#include "cli/socket_wait.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/support/temp_dir.h"

namespace tensorbroker::cli {
namespace {

TEST(FlockHeldIn, AHolderOfThatFileCountsAWaiterOrAnotherFileDoesNot) {
  const std::string locks =
      "1: POSIX  ADVISORY  WRITE 300 00:19:777 0 EOF\n"
      "2: FLOCK  ADVISORY  WRITE 4711 00:1a:12345 0 EOF\n"
      "2: -> FLOCK  ADVISORY  WRITE 4712 fd:02:99 0 EOF\n";
  EXPECT_TRUE(FlockHeldIn(locks, makedev(0, 0x1a), 12345));
  EXPECT_FALSE(FlockHeldIn(locks, makedev(0, 0x1a), 1234));  // another file
  EXPECT_FALSE(FlockHeldIn(locks, makedev(0xfd, 2), 99));    // only waiting for it
  EXPECT_FALSE(FlockHeldIn(locks, makedev(0, 0x19), 777));   // a POSIX lock, not flock
  EXPECT_FALSE(FlockHeldIn("", makedev(0, 0x1a), 12345));
}

class AwaitSocketPathTest : public ::testing::Test {
 protected:
  tensorbroker::testing::TempDir dir_{"tbsockwait"};
  std::string path_ = dir_.path() + "/broker.sock";
};

TEST_F(AwaitSocketPathTest, AMissingPathIsUnavailableNamingIt) {
  const absl::Status missing = AwaitSocketPath(path_, absl::ZeroDuration(), absl::ZeroDuration());
  EXPECT_TRUE(absl::IsUnavailable(missing)) << missing;
  EXPECT_EQ(missing.message(),
            absl::StrCat(path_,
                         " does not exist: no tensorbrokerd serves there (is it running? "
                         "see --socket / $TENSORBROKER_SOCKET)"));
}

TEST_F(AwaitSocketPathTest, AnExistingPathIsLeftToTheConnect) {
  const int fd = ::open(path_.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  ::close(fd);
  EXPECT_TRUE(AwaitSocketPath(path_, absl::ZeroDuration(), absl::ZeroDuration()).ok());
}

// While a daemon holds the lock (this test here), a missing path is waited for up to the
// timeout, well past the grace; a lock file nobody holds is waited for no longer than the grace.
TEST_F(AwaitSocketPathTest, AHeldLockIsWaitedForToTheTimeoutAFreeOneIsNot) {
  const int lock = ::open(absl::StrCat(path_, ".lock").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  ASSERT_GE(lock, 0);
  ASSERT_EQ(::flock(lock, LOCK_EX | LOCK_NB), 0);
  absl::Time start = absl::Now();
  EXPECT_TRUE(
      absl::IsUnavailable(AwaitSocketPath(path_, absl::Milliseconds(400), absl::ZeroDuration())));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(400));  // it waited, whatever the load
  ::close(lock);                                            // released
  // Unheld: only the grace. (No upper bound on how long that took: a loaded machine may be
  // slow; the outcome is what matters.)
  EXPECT_TRUE(
      absl::IsUnavailable(AwaitSocketPath(path_, absl::Seconds(600), absl::ZeroDuration())));
}

}  // namespace
}  // namespace tensorbroker::cli
