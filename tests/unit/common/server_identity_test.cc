// Whom a client trusts to serve (common/server_identity.h) and the user names in its messages
// (common/user_names.h). The refusal of another uid's real server is in
// tests/integration/identity_test.cc; here: the trusted set, its wording, the setting
// $TENSORBROKER_DAEMON_USER (given as an argument: no setenv in a threaded test), and the
// answers for this process's own servers and for nobody there.
#include "common/server_identity.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/unique_fd.h"
#include "common/user_names.h"

namespace tensorbroker {
namespace {

constexpr uid_t kNoName = 4000000000u;  // a uid no passwd file names

TEST(UserNames, DescribeAndParse) {
  EXPECT_EQ(DescribeUid(0), "uid 0 (root)");
  EXPECT_EQ(DescribeUid(kNoName), "uid 4000000000");
  EXPECT_EQ(UidOfUser("root"), 0u);
  EXPECT_EQ(UidOfUser("no such user"), std::nullopt);
  EXPECT_EQ(*ParseUser("root", "--user"), 0u);
  EXPECT_EQ(*ParseUser("2470", "--user"), 2470u);
  for (const char* bad : {"", "no such user", "-1", "4294967295", "12345678901", "1e3"}) {
    const auto parsed = ParseUser(bad, "--user");
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(parsed.status().message(),
              absl::StrCat("--user '", bad, "' is neither a user name known here nor a uid"));
  }
}

TEST(TrustedServers, RootTheDaemonUserAndYou) {
  auto trusted = TrustedServersFor(1000, "root");
  ASSERT_TRUE(trusted.ok()) << trusted.status();
  EXPECT_TRUE(trusted->Trusts(0));
  EXPECT_TRUE(trusted->Trusts(1000));
  EXPECT_FALSE(trusted->Trusts(1001));
  EXPECT_FALSE(trusted->Trusts(65534));
  EXPECT_EQ(trusted->Describe(), "root or uid 1000 (you)");  // root named twice is named once

  auto numeric = TrustedServersFor(1000, absl::StrCat(kNoName));
  ASSERT_TRUE(numeric.ok()) << numeric.status();
  EXPECT_TRUE(numeric->Trusts(kNoName));
  EXPECT_FALSE(numeric->Trusts(65534));
  EXPECT_EQ(numeric->Describe(), "root, uid 4000000000 or uid 1000 (you)");

  auto as_root = TrustedServersFor(0, absl::StrCat(kNoName));
  ASSERT_TRUE(as_root.ok());
  EXPECT_EQ(as_root->Describe(), "root or uid 4000000000");

  auto as_daemon_user = TrustedServersFor(kNoName, absl::StrCat(kNoName));
  ASSERT_TRUE(as_daemon_user.ok());
  EXPECT_EQ(as_daemon_user->Describe(), "root or uid 4000000000 (you)");
}

TEST(TrustedServers, NamedDaemonUserIsNamed) {
  const std::optional<std::string> nobody = UserName(65534);
  if (!nobody.has_value()) GTEST_SKIP() << "uid 65534 has no name here";
  auto trusted = TrustedServersFor(1000, *nobody);
  ASSERT_TRUE(trusted.ok()) << trusted.status();
  EXPECT_TRUE(trusted->Trusts(65534));
  EXPECT_EQ(trusted->Describe(), absl::StrCat("root, ", *nobody, " or uid 1000 (you)"));
}

TEST(TrustedServers, DefaultDaemonUserIsTheSystemUserTensorbroker) {
  auto trusted = TrustedServersFor(1000, "");
  ASSERT_TRUE(trusted.ok()) << trusted.status();
  EXPECT_EQ(trusted->daemon_user, UidOfUser("tensorbroker"));
  EXPECT_EQ(trusted->Describe(), UidOfUser("tensorbroker").has_value()
                                     ? "root, tensorbroker or uid 1000 (you)"
                                     : "root or uid 1000 (you)");
}

TEST(TrustedServers, AnUnknownSettingIsRefusedNotIgnored) {
  auto trusted = TrustedServersFor(1000, "no-such-user-here");
  EXPECT_EQ(trusted.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(trusted.status().message(),
            "$TENSORBROKER_DAEMON_USER 'no-such-user-here' is neither a user name known here "
            "nor a uid");
}

TEST(ServerIdentity, ThisProcessTrustsItsOwnServer) {
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  UniqueFd a(pair[0]), b(pair[1]);
  EXPECT_TRUE(CheckServerIdentity(a.get(), "pair").ok());
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  UniqueFd read_end(pipe_fds[0]), write_end(pipe_fds[1]);
  const absl::Status not_socket = CheckServerIdentity(read_end.get(), "pipe");
  EXPECT_EQ(not_socket.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(not_socket.message(), "SO_PEERCRED of pipe: Socket operation on non-socket");
}

class ListeningDir : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string t = (std::filesystem::temp_directory_path() / "tbident.XXXXXX").string();
    ASSERT_NE(::mkdtemp(t.data()), nullptr);
    dir_ = t;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(ListeningDir, VerifyServerAtAnswersOkForItsOwnListener) {
  const std::string path = dir_ + "/broker.sock";
  UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  path.copy(address.sun_path, sizeof(address.sun_path) - 1);
  ASSERT_EQ(::bind(listener.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)),
            0);
  ASSERT_EQ(::listen(listener.get(), 4), 0);
  EXPECT_TRUE(VerifyServerAt(path).ok());
}

TEST_F(ListeningDir, VerifyServerAtNobodyThereIsUnavailable) {
  const std::string path = dir_ + "/missing.sock";
  const absl::Status status = VerifyServerAt(path);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(status.message(), absl::StrCat(path, ": No such file or directory"));
  const std::string too_long = dir_ + "/" + std::string(120, 'x');
  const absl::Status long_status = VerifyServerAt(too_long);
  EXPECT_EQ(long_status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(long_status.message(),
            absl::StrCat("socket path '", too_long, "' is longer than 107 bytes"));
}

}  // namespace
}  // namespace tensorbroker
