// Telling who holds a broker socket (daemon/net/socket_holder.h): the /proc formats it reads, fixed
// texts as the kernel writes them, then the real /proc with a lock, a listener and a process of
// this test's own; and the descriptions and advice an operator reads.
#include "daemon/net/socket_holder.h"

#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/unique_fd.h"
#include "tests/support/temp_dir.h"
#include "tests/support/unix_listener.h"

namespace tensorbroker::daemon {
namespace {

using ::tensorbroker::testing::ListenOnUnixSocket;
using ::tensorbroker::testing::TempDir;

TEST(SocketHolder, FlockHolderIsReadFromProcLocksByDeviceAndInode) {
  const std::string locks =
      "1: POSIX  ADVISORY  WRITE 900 08:01:77 0 EOF\n"
      "2: FLOCK  ADVISORY  WRITE 4711 00:1a:12345 0 EOF\n"
      "2: -> FLOCK  ADVISORY  WRITE 4712 00:1a:12345 0 EOF\n"
      "3: FLOCK  ADVISORY  WRITE 0 fd:02:99 0 EOF\n";
  EXPECT_EQ(FlockHolderIn(locks, makedev(0, 0x1a), 12345), 4711);
  EXPECT_EQ(FlockHolderIn(locks, makedev(0xfd, 2), 99), 0);  // a holder in another namespace
  EXPECT_EQ(FlockHolderIn(locks, makedev(8, 1), 77), std::nullopt);  // a POSIX lock, not flock
  EXPECT_EQ(FlockHolderIn(locks, makedev(0, 0x1a), 1234), std::nullopt);
  EXPECT_EQ(FlockHolderIn("", makedev(0, 0x1a), 12345), std::nullopt);
}

TEST(SocketHolder, FlockHolderFindsThisProcessOnARealFileOfAnyMode) {
  TempDir dir("tbholder");
  const std::string path = dir.path() + "/x.lock";
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0000));  // unreadable by mode
  ASSERT_TRUE(fd.valid());
  struct stat file {};
  ASSERT_EQ(::fstat(fd.get(), &file), 0);
  EXPECT_EQ(FlockHolder(file.st_dev, file.st_ino), std::nullopt);
  ASSERT_EQ(::flock(fd.get(), LOCK_EX | LOCK_NB), 0);
  EXPECT_EQ(FlockHolder(file.st_dev, file.st_ino), ::getpid());
  ASSERT_EQ(::flock(fd.get(), LOCK_UN), 0);
  EXPECT_EQ(FlockHolder(file.st_dev, file.st_ino), std::nullopt);
}

TEST(SocketHolder, ListeningSocketsAreReadFromProcNetUnix) {
  const std::string table =
      "Num       RefCount Protocol Flags    Type St Inode Path\n"
      "0000000000000000: 00000002 00000000 00010000 0001 01 501 /run/tensorbroker/broker.sock\n"
      "0000000000000000: 00000002 00000000 00010000 0005 01 502 /run/tensorbroker/broker.sock.fd\n"
      "0000000000000000: 00000003 00000000 00000000 0001 03 503 /run/tensorbroker/broker.sock\n"
      "0000000000000000: 00000002 00000000 00000000 0001 01 504 /tmp/bound-not-listening\n"
      "0000000000000000: 00000002 00000000 00010000 0001 01 505 /tmp/a dir/with spaces.sock\n"
      "0000000000000000: 00000002 00000000 00010000 0001 01 506 @abstract\n"
      "0000000000000000: 00000002 00000000 00000000 0002 01 507\n";
  EXPECT_EQ(ListeningSocketIn(table, "/run/tensorbroker/broker.sock"), 501u);
  EXPECT_EQ(ListeningSocketIn(table, "/run/tensorbroker/broker.sock.fd"), 502u);
  EXPECT_EQ(ListeningSocketIn(table, "/tmp/bound-not-listening"), std::nullopt);
  EXPECT_EQ(ListeningSocketIn(table, "/tmp/a dir/with spaces.sock"), 505u);
  EXPECT_EQ(ListeningSocketIn(table, "/run/tensorbroker/other.sock"), std::nullopt);
}

TEST(SocketHolder, ARealListenerIsFoundWithItsProcessAndAClosedOneIsNot) {
  TempDir dir("tbholder");
  const std::string path = dir.path() + "/broker.sock";
  {
    UniqueFd listener = ListenOnUnixSocket(path);
    ASSERT_TRUE(listener.valid());
    std::optional<uint64_t> inode = ListeningSocketAt(path);
    ASSERT_TRUE(inode.has_value());
    EXPECT_EQ(ProcessWithSocket(*inode), ::getpid());
    const absl::Status status = CheckNobodyListens(path, "--socket");
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
    const ProcessView self = ViewProcess(::getpid());
    EXPECT_EQ(status.message(),
              absl::StrCat("--socket ", path, ": a socket there is served by ",
                           DescribeProcess(self), ", though no tensorbrokerd holds its lock; ",
                           "stop it with `kill ", ::getpid(), "`, or choose another --socket"));
    // Told without connecting: the listener has nobody waiting.
    EXPECT_LT(::accept(listener.get(), nullptr, nullptr), 0);
    EXPECT_EQ(errno, EAGAIN);
  }
  ASSERT_TRUE(std::filesystem::exists(path));  // the file a closed listener left
  EXPECT_EQ(ListeningSocketAt(path), std::nullopt);
  EXPECT_TRUE(CheckNobodyListens(path, "--socket").ok());
}

TEST(SocketHolder, ARelativePathIsMatchedAsBoundAndAsAbsolute) {
  TempDir dir("tbholder");
  const std::filesystem::path previous = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  UniqueFd relative = ListenOnUnixSocket("rel.sock");
  UniqueFd absolute = ListenOnUnixSocket(dir.path() + "/abs.sock");
  EXPECT_TRUE(ListeningSocketAt("rel.sock").has_value());
  EXPECT_TRUE(ListeningSocketAt("abs.sock").has_value());
  EXPECT_TRUE(ListeningSocketAt(dir.path() + "/./abs.sock").has_value());
  std::filesystem::current_path(previous);
}

TEST(SocketHolder, SystemdUnitsAreReadFromCgroups) {
  bool user = true;
  EXPECT_EQ(SystemdUnitOfCgroup("0::/system.slice/tensorbrokerd.service\n", &user),
            "tensorbrokerd.service");
  EXPECT_FALSE(user);
  EXPECT_EQ(SystemdUnitOfCgroup("12:pids:/x\n1:name=systemd:/system.slice/tensorbrokerd.service\n"
                                "0::/\n",
                                &user),
            "tensorbrokerd.service");
  EXPECT_EQ(SystemdUnitOfCgroup(
                "0::/user.slice/user-1000.slice/user@1000.service/app.slice/tb.service\n", &user),
            "tb.service");
  EXPECT_TRUE(user);
  // A terminal's process under the user manager, a login session, a container: no unit.
  EXPECT_EQ(SystemdUnitOfCgroup(
                "0::/user.slice/user-1000.slice/user@1000.service/app.slice/vte-1.scope\n", &user),
            "");
  EXPECT_EQ(SystemdUnitOfCgroup("0::/user.slice/user-1000.slice/session-3.scope\n", &user), "");
  EXPECT_EQ(SystemdUnitOfCgroup("9:name=systemd:/\n4:memory:/docker/abc\n0::/\n", &user), "");
}

TEST(SocketHolder, DescriptionsSayWhoAndHowToStopIt) {
  ProcessView service{812, true, "tensorbrokerd", 0, "tensorbrokerd.service", false};
  EXPECT_EQ(DescribeProcess(service),
            "pid 812 (tensorbrokerd, user root, systemd unit tensorbrokerd.service)");
  EXPECT_EQ(HowToStop(service),
            "stop it with `systemctl stop tensorbrokerd.socket tensorbrokerd.service`");

  ProcessView own_unit{813, true, "tensorbrokerd", 0, "tensorbroker@gpu0.service", true};
  EXPECT_EQ(DescribeProcess(own_unit),
            "pid 813 (tensorbrokerd, user root, user's systemd unit tensorbroker@gpu0.service)");
  EXPECT_EQ(HowToStop(own_unit), "stop it with `systemctl --user stop tensorbroker@gpu0.service`");

  // Started by hand inside a CI runner's unit: stopping that unit is not the advice.
  ProcessView by_hand{4711, true, "tensorbrokerd", 0, "ci-runner.service", false};
  EXPECT_EQ(DescribeProcess(by_hand),
            "pid 4711 (tensorbrokerd, user root, systemd unit ci-runner.service)");
  EXPECT_EQ(HowToStop(by_hand), "stop it with `kill 4711` (it exits cleanly on SIGTERM)");

  ProcessView socket_unit{1, true, "systemd", 0, "", false};
  EXPECT_EQ(DescribeProcess(socket_unit), "pid 1 (systemd, user root)");
  EXPECT_EQ(HowToStop(socket_unit),
            "it listens for a socket unit (tensorbrokerd.socket, when the package is installed, "
            "starts the service at the first connection); stop it with `systemctl stop "
            "tensorbrokerd.socket`");

  ProcessView elsewhere{321, false, "", std::nullopt, "", false};
  EXPECT_EQ(DescribeProcess(elsewhere),
            "pid 321 (not visible from here: another PID namespace, such as a container's)");
  EXPECT_EQ(HowToStop(elsewhere), "stop it where it runs");
  EXPECT_EQ(DescribeProcess(ProcessView{}), "a process in a PID namespace not visible from here");
}

TEST(SocketHolder, ThisProcessIsViewedAsProcSaysIt) {
  const ProcessView self = ViewProcess(::getpid());
  EXPECT_TRUE(self.visible);
  EXPECT_EQ(self.command, "unit_tests");
  EXPECT_EQ(self.uid, ::geteuid());
  EXPECT_FALSE(ViewProcess(0).visible);
}

}  // namespace
}  // namespace tensorbroker::daemon
