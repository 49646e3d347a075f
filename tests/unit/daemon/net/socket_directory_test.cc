// Where a broker socket may live (common/socket_directory.h, daemon/net/socket_directory_setup.h),
// on real directories: the daemon's rules for its socket's directory, the per-user
// /tmp/tensorbroker-$UID rule that clients apply too, and the modes of what the daemon creates.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/socket_directory.h"
#include "common/socket_path.h"
#include "common/user_names.h"
#include "daemon/net/socket_directory_setup.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace tensorbroker {
namespace {

using ::tensorbroker::testing::TempDir;

constexpr uid_t kOther = 65534;

// The users a daemon of `self` trusts with its directory, with no daemon user configured.
TrustedServers Alone(uid_t self) { return TrustedServers{self, std::nullopt}; }

mode_t ModeOf(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 ? info.st_mode & 07777 : 0;
}

std::string WritableMessage(const std::string& dir, const std::string& mode,
                            const std::string& why) {
  return absl::StrCat("directory ", dir, " is mode ", mode, " (", why,
                      "): another user could replace the socket or take its name first; use a "
                      "directory only its owner may write (mode 0700, or 0750 to let a group "
                      "connect)");
}

TEST(SocketDirectory, OfASocketPathIsAbsoluteAndNormal) {
  EXPECT_EQ(SocketDirectoryOf("/tmp/d/./broker.sock"), "/tmp/d");
  EXPECT_EQ(SocketDirectoryOf("/tmp/d//broker.sock"), "/tmp/d");
  EXPECT_EQ(SocketDirectoryOf("/broker.sock"), "/");
  EXPECT_EQ(SocketDirectoryOf("broker.sock"), std::filesystem::current_path().string());
}

TEST(SocketDirectory, PerUserDirectoriesAreKnownByTheirExactName) {
  EXPECT_EQ(PerUserSocketDirectory(1000), "/tmp/tensorbroker-1000");
  EXPECT_EQ(PerUserSocketDirectoryOwner("/tmp/tensorbroker-1000"), 1000u);
  EXPECT_EQ(PerUserSocketDirectoryOwner("/tmp/tensorbroker-0"), 0u);
  for (const char* other : {"/tmp/tensorbroker-", "/tmp/tensorbroker-01", "/tmp/tensorbroker-+1",
                            "/tmp/tensorbroker-1000/x", "/tmp/tensorbroker-abc",
                            "/var/tmp/tensorbroker-1000", "/tmp/tensorbroker-99999999999"}) {
    EXPECT_EQ(PerUserSocketDirectoryOwner(other), std::nullopt) << other;
  }
}

TEST(SocketDirectory, DaemonCreatesWhatIsMissingMode0700WhateverTheUmask) {
  TempDir base("tbsockdir");
  const mode_t old_umask = ::umask(0277);  // would make 0500 directories
  const absl::Status prepared = daemon::PrepareSocketDirectory(base.path() + "/a/b/broker.sock");
  ::umask(old_umask);
  ASSERT_TRUE(prepared.ok()) << prepared;
  EXPECT_EQ(ModeOf(base.path() + "/a"), 0700u);
  EXPECT_EQ(ModeOf(base.path() + "/a/b"), 0700u);
}

TEST(SocketDirectory, DaemonAcceptsDirectoriesOnlyItsOwnerMayWrite) {
  TempDir dir("tbsockdir");
  for (mode_t mode : {0700, 0750, 0755, 0711, 0500}) {
    ASSERT_EQ(::chmod(dir.path().c_str(), mode), 0);
    EXPECT_TRUE(CheckDaemonSocketDirectory(dir.path(), Alone(::geteuid())).ok())
        << std::oct << mode;
  }
}

TEST(SocketDirectory, DaemonRefusesDirectoriesOthersOrItsGroupMayWrite) {
  TempDir dir("tbsockdir");
  struct Case {
    mode_t mode;
    const char* text;
    const char* why;
  };
  for (const Case& c :
       {Case{0777, "0777", "writable by others"}, Case{0703, "0703", "writable by others"},
        Case{0775, "0775", "writable by its group"},
        Case{01777, "1777", "writable by others, sticky like /tmp"},
        Case{01770, "1770", "writable by its group, sticky like /tmp"}}) {
    ASSERT_EQ(::chmod(dir.path().c_str(), c.mode), 0);
    const absl::Status status = CheckDaemonSocketDirectory(dir.path(), Alone(::geteuid()));
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << c.text;
    EXPECT_EQ(status.message(), WritableMessage(dir.path(), c.text, c.why));
  }
  const absl::Status prepared = daemon::PrepareSocketDirectory(dir.path() + "/broker.sock");
  EXPECT_EQ(prepared.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(
      prepared.message(),
      absl::StrCat("--socket ", dir.path(), "/broker.sock: ",
                   WritableMessage(dir.path(), "1770", "writable by its group, sticky like /tmp")));
}

TEST(SocketDirectory, DaemonRefusesADirectoryOfAnotherOwner) {
  if (::geteuid() != 0) GTEST_SKIP() << "chown needs root";
  TempDir dir("tbsockdir");
  ASSERT_EQ(::chown(dir.path().c_str(), kOther, kOther), 0);
  const absl::Status status = CheckDaemonSocketDirectory(dir.path(), Alone(0));
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(),
            absl::StrCat("directory ", dir.path(), " is owned by ", DescribeUid(kOther),
                         ", not by root: its owner could replace the socket (set "
                         "TENSORBROKER_DAEMON_USER to that user if it is the one the broker runs "
                         "as)"));
  const absl::Status as_1000 = CheckDaemonSocketDirectory(dir.path(), Alone(1000));
  EXPECT_EQ(as_1000.message(),
            absl::StrCat("directory ", dir.path(), " is owned by ", DescribeUid(kOther),
                         ", not by root or uid 1000 (you): its owner could replace the socket "
                         "(set TENSORBROKER_DAEMON_USER to that user if it is the one the broker "
                         "runs as)"));
  EXPECT_TRUE(CheckDaemonSocketDirectory(dir.path(), Alone(kOther)).ok());  // its own
  ASSERT_EQ(::chown(dir.path().c_str(), 0, 0), 0);
  EXPECT_TRUE(CheckDaemonSocketDirectory(dir.path(), Alone(kOther)).ok());  // root's
}

// The quick start run as root in /run/tensorbroker, which the package made the service user's:
// clients trust that user to serve, so its directory is as good as root's.
TEST(SocketDirectory, DaemonAcceptsADirectoryOfTheDaemonUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "chown needs root";
  TempDir dir("tbsockdir");
  ASSERT_EQ(::chmod(dir.path().c_str(), 0750), 0);
  ASSERT_EQ(::chown(dir.path().c_str(), kOther, kOther), 0);
  const TrustedServers with_daemon_user{0, kOther};
  EXPECT_TRUE(CheckDaemonSocketDirectory(dir.path(), with_daemon_user).ok());
  const TrustedServers other_daemon_user{1000, 4242};
  const absl::Status status = CheckDaemonSocketDirectory(dir.path(), other_daemon_user);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(),
            absl::StrCat("directory ", dir.path(), " is owned by ", DescribeUid(kOther),
                         ", not by root, uid 4242 or uid 1000 (you): its owner could replace the "
                         "socket (set TENSORBROKER_DAEMON_USER to that user if it is the one the "
                         "broker runs as)"));
}

// The real /tmp/tensorbroker-<uid>, of a uid nobody uses.
class PerUserDirectory : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "making another uid's directory needs root";
    if (std::filesystem::exists(path_)) GTEST_SKIP() << path_ << " exists already";
    ASSERT_EQ(::mkdir(path_.c_str(), 0700), 0);
    ASSERT_EQ(::chmod(path_.c_str(), 0700), 0);
    ASSERT_EQ(::chown(path_.c_str(), user_, user_), 0);
  }
  void TearDown() override {
    std::error_code ignored;
    if (made_) std::filesystem::remove_all(path_, ignored);
  }
  std::string Rule() const {
    return "the per-user socket directory must be its user's own, mode 0700";
  }

  const uid_t user_ = 3100000000u + static_cast<uid_t>(::getpid() % 1000000);
  const std::string path_ = PerUserSocketDirectory(user_);
  bool made_ = !std::filesystem::exists(path_);
};

TEST_F(PerUserDirectory, ItsUsersOwnMode0700IsTrusted) {
  EXPECT_TRUE(CheckPerUserSocketDirectory(path_).ok());
  EXPECT_TRUE(CheckDaemonSocketDirectory(path_, Alone(user_)).ok());
}

TEST_F(PerUserDirectory, AnyOtherModeIsRefused) {
  for (mode_t mode : {0755, 0750, 0711, 0500}) {
    ASSERT_EQ(::chmod(path_.c_str(), mode), 0);
    const std::string expected =
        absl::StrCat("directory ", path_, " is mode ", absl::StrFormat("%04o", mode),
                     ", not 0700: ", Rule(), " (chmod 0700 it)");
    for (const absl::Status& status :
         {CheckPerUserSocketDirectory(path_), CheckDaemonSocketDirectory(path_, Alone(user_))}) {
      EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_EQ(status.message(), expected);
    }
  }
}

TEST_F(PerUserDirectory, AnotherOwnerIsRefusedEvenRoot) {
  for (uid_t owner : {kOther, uid_t{0}}) {
    ASSERT_EQ(::chown(path_.c_str(), owner, owner), 0);
    const std::string expected =
        absl::StrCat("directory ", path_, " is owned by ", DescribeUid(owner), ", not by uid ",
                     user_, ": ", Rule(), " (someone else may have created it first; remove it)");
    for (const absl::Status& status :
         {CheckPerUserSocketDirectory(path_), CheckDaemonSocketDirectory(path_, Alone(user_))}) {
      EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_EQ(status.message(), expected);
    }
  }
}

// The packaged /run/tensorbroker before the package made it the service user's (root's, 0755):
// a daemon of another uid is told why it cannot serve there, not "cannot open lock file".
TEST(SocketDirectory, DaemonRefusesADirectoryItMayNotWrite) {
  if (::geteuid() != 0) GTEST_SKIP() << "acting as uid 65534 needs root";
  TempDir dir("tbsockdir");
  ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
  // The child says what PrepareSocketDirectory answered it on its stdout.
  const auto prepare = [&]() -> int {
    const absl::Status status = daemon::PrepareSocketDirectory(dir.path() + "/broker.sock");
    const std::string text =
        absl::StrCat(absl::StatusCodeToString(status.code()), ": ", status.message());
    const bool written =
        ::write(STDOUT_FILENO, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    return written ? 0 : 3;
  };
  testing::SubprocessOptions options;
  options.run_as = testing::RunAsUser{kOther, kOther};  // it exits 126 when it cannot
  options.capture_stdout = true;
  absl::StatusOr<testing::Subprocess> child = testing::Subprocess::Fork(prepare, options);
  ASSERT_TRUE(child.ok()) << child.status();
  absl::StatusOr<testing::ProcessOutput> done = child->Finish();
  ASSERT_TRUE(done.ok()) << done.status();
  const std::string& said = done->out;
  ASSERT_TRUE(WIFEXITED(done->status) && WEXITSTATUS(done->status) == 0) << done->status;
  EXPECT_EQ(said,
            absl::StrCat("FAILED_PRECONDITION: --socket ", dir.path(), "/broker.sock: directory ",
                         dir.path(), " (owner uid 0 (root), mode 0755) does not let this daemon's ",
                         DescribeUid(kOther), " create files there: Permission denied"));
}

TEST(SocketDirectory, AnAbsentPerUserDirectoryHasNothingToDistrust) {
  EXPECT_TRUE(CheckPerUserSocketDirectory(PerUserSocketDirectory(4000000001u)).ok());
}

}  // namespace
}  // namespace tensorbroker
