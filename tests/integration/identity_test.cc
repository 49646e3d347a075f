// Clients check who serves, and the daemon where it serves (issue 12, point 8). A squatter of
// another uid (65534, a forked child of this test: squatter.h) listens where a victim will
// connect, or creates a victim's per-user /tmp/tensorbroker-$UID first; the victim's client
// library, CLI and daemon must refuse with FAILED_PRECONDITION and a message naming the socket
// or directory and its owner, and the squatter must receive nothing. The same-uid and root cases
// still work.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/server_identity.h"
#include "common/socket_path.h"
#include "common/user_names.h"
#include "tensorbroker/v1/broker.grpc.pb.h"
#include "tests/integration/squatter.h"
#include "tests/integration/test_util.h"
#include "tests/integration/uid_process.h"
#include "tests/support/temp_dir.h"

namespace tensorbroker::testing {
namespace {

// A 4-element float32 .npy file at `path`, readable by everyone.
void WriteNpy(const std::string& path) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }";
  header.append(64 - (10 + header.size() + 1) % 64, ' ');
  header.push_back('\n');
  const float values[4] = {1, 2, 3, 4};
  std::ofstream out(path, std::ios::binary);
  out << "\x93NUMPY" << '\x01' << '\x00' << static_cast<char>(header.size() & 0xff)
      << static_cast<char>(header.size() >> 8) << header;
  out.write(reinterpret_cast<const char*>(values), sizeof(values));
  out.close();
  ::chmod(path.c_str(), 0644);
}

// Whom a root client trusts here, as its refusals say it (the default daemon user).
std::string TrustedByRoot() {
  return UidOfUser(kDefaultDaemonUser).has_value() ? "root or tensorbroker" : "root";
}

std::string Refusal(const std::string& socket) {
  return absl::StrCat("socket ", socket, " is served by ", DescribeUid(kSquatterUid), ", not by ",
                      TrustedByRoot(),
                      ": refusing to trust it (if that is your broker, set "
                      "TENSORBROKER_DAEMON_USER to the user it runs as)");
}

class IdentityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "acting as uid 65534 needs root";
    if (std::getenv(kDaemonUserVariable) != nullptr) {
      GTEST_SKIP() << "$" << kDaemonUserVariable << " is set; these tests expect the default";
    }
  }
};

TEST_F(IdentityTest, ClientAndCliRefuseASocketServedByAnotherUidAndSendItNothing) {
  TempDir dir("tbident"), files("tbident");
  ASSERT_FALSE(dir.path().empty() || files.path().empty());
  ASSERT_EQ(::chown(dir.path().c_str(), kSquatterUid, kSquatterUid), 0);  // the squatter's own
  const std::string socket = dir.path() + "/broker.sock";
  ASSERT_OK_AND_ASSIGN(Squatter squatter, Squatter::Start(socket));

  auto client = Client::Connect(socket, std::chrono::seconds(2));
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(client.status().message(), Refusal(socket));

  const std::string npy = files.path() + "/x.npy";
  WriteNpy(npy);
  ASSERT_OK_AND_ASSIGN(
      ProcessOutput put,
      RunAs(0, 0, {TENSORBROKER_CLI_PATH, "--socket", socket, "put", "victim/x", npy},
            {"PATH=/usr/bin:/bin"}));
  EXPECT_TRUE(WIFEXITED(put.status) && WEXITSTATUS(put.status) == 1)
      << DescribeWaitStatus(put.status);
  EXPECT_EQ(put.err, absl::StrCat("tensorbroker: cannot connect to tensorbrokerd at ", socket,
                                  ": FAILED_PRECONDITION: ", Refusal(socket), "\n"));
  EXPECT_EQ(put.out, "");

  // One probe each, closed unanswered and unwritten; the local channel never reached.
  ASSERT_OK_AND_ASSIGN(Catch caught, squatter.Stop());
  EXPECT_EQ(caught.stream_connections, 2);
  EXPECT_EQ(caught.stream_bytes, 0);
  EXPECT_EQ(caught.seqpacket_connections, 0);
  EXPECT_EQ(caught.seqpacket_bytes, 0);
}

TEST_F(IdentityTest, ClientRefusesARealDaemonOfAnotherUidWhichGetsNoSession) {
  TempDir dir("tbident");
  ASSERT_FALSE(dir.path().empty());
  ASSERT_EQ(::chown(dir.path().c_str(), kSquatterUid, kSquatterUid), 0);
  const std::string socket = dir.path() + "/broker.sock";
  ASSERT_OK_AND_ASSIGN(UidProcess daemon,
                       UidProcess::Start(kSquatterUid, kSquatterUid,
                                         {DaemonBinaryPath(), "--config", "/dev/null", "--socket",
                                          socket, "--capacity", "64M", "--log-level", "warning"},
                                         {}));
  ASSERT_OK(WaitUntilListening(socket, daemon));

  auto client = Client::Connect(socket, std::chrono::seconds(2));
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(client.status().message(), Refusal(socket));

  // Asked over raw gRPC (no client library, so no check): the squatter's daemon saw no session
  // and holds nothing.
  v1::BrokerStats stats;
  {
    auto stub = v1::Broker::NewStub(
        grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    ASSERT_TRUE(stub->Stats(&context, v1::StatsRequest(), &stats).ok());
  }
  EXPECT_EQ(stats.clients(), 0u);
  EXPECT_EQ(stats.tensors(), 0u);
  EXPECT_EQ(stats.pending(), 0u);
  ASSERT_OK_AND_ASSIGN(ProcessOutput stopped, daemon.Finish(SIGTERM));
  EXPECT_TRUE(WIFEXITED(stopped.status) && WEXITSTATUS(stopped.status) == 0) << stopped.err;
}

// The measured attack: another user creates /tmp/tensorbroker-$UID before the victim (a non-root
// uid without $XDG_RUNTIME_DIR, so the default socket is there) and serves in it.
TEST_F(IdentityTest, SquattedPerUserDirectoryIsRefusedByTheVictimsCliAndDaemon) {
  const uid_t victim = 3000000000u + static_cast<uid_t>(::getpid() % 1000000);
  const std::string directory = PerUserSocketDirectory(victim);
  const std::string socket = directory + "/broker.sock";
  if (std::filesystem::exists(directory)) GTEST_SKIP() << directory << " exists already";
  struct Cleanup {
    std::string path;
    ~Cleanup() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  } cleanup{directory};
  TempDir files("tbident");
  ASSERT_EQ(::chmod(files.path().c_str(), 0755), 0);
  const std::string npy = files.path() + "/x.npy";
  WriteNpy(npy);
  const std::vector<std::string> env = {"PATH=/usr/bin:/bin", "HOME=/"};
  const std::vector<std::string> daemon_argv = {
      DaemonBinaryPath(), "--config", "/dev/null", "--capacity", "64M", "--log-level", "warning"};
  const std::string refusal = absl::StrCat(
      "directory ", directory, " is owned by ", DescribeUid(kSquatterUid), ", not by uid ", victim,
      ": the per-user socket directory must be its user's own, mode 0700 (someone else may have "
      "created it first; remove it)");
  {
    ASSERT_OK_AND_ASSIGN(Squatter squatter, Squatter::Start(socket, 0755));
    ASSERT_OK_AND_ASSIGN(
        ProcessOutput put,
        RunAs(victim, victim, {TENSORBROKER_CLI_PATH, "put", "victim/x", npy}, env));
    EXPECT_TRUE(WIFEXITED(put.status) && WEXITSTATUS(put.status) == 1)
        << DescribeWaitStatus(put.status);
    EXPECT_EQ(put.err, absl::StrCat("tensorbroker: cannot connect to tensorbrokerd at ", socket,
                                    ": FAILED_PRECONDITION: refusing to trust socket ", socket,
                                    ": ", refusal, "\n"));
    ASSERT_OK_AND_ASSIGN(ProcessOutput daemon, RunAs(victim, victim, daemon_argv, env));
    EXPECT_TRUE(WIFEXITED(daemon.status) && WEXITSTATUS(daemon.status) == 1)
        << DescribeWaitStatus(daemon.status);
    EXPECT_EQ(daemon.err, absl::StrCat("<3>tensorbrokerd: --socket ", socket, ": ", refusal, "\n"));
    // Refused on the directory: not even a connect reached the squatter.
    ASSERT_OK_AND_ASSIGN(Catch caught, squatter.Stop());
    EXPECT_EQ(caught.stream_connections, 0);
    EXPECT_EQ(caught.seqpacket_connections, 0);
  }

  // With the squatter's directory gone, the victim's daemon makes its own (0700) and serves its
  // own CLI.
  std::filesystem::remove_all(directory);
  ASSERT_OK_AND_ASSIGN(UidProcess daemon, UidProcess::Start(victim, victim, daemon_argv, env));
  ASSERT_OK(WaitUntilListening(socket, daemon));
  struct stat info {};
  ASSERT_EQ(::stat(directory.c_str(), &info), 0);
  EXPECT_EQ(info.st_uid, victim);
  EXPECT_EQ(info.st_mode & 07777, 0700u);
  ASSERT_OK_AND_ASSIGN(ProcessOutput put,
                       RunAs(victim, victim, {TENSORBROKER_CLI_PATH, "put", "victim/x", npy}, env));
  EXPECT_EQ(put.status, 0) << put.err;
  ASSERT_OK_AND_ASSIGN(ProcessOutput ls, RunAs(victim, victim, {TENSORBROKER_CLI_PATH, "ls"}, env));
  EXPECT_EQ(ls.status, 0) << ls.err;
  EXPECT_NE(ls.out.find("victim/x"), std::string::npos) << ls.out;
  ASSERT_OK_AND_ASSIGN(ProcessOutput stopped, daemon.Finish(SIGTERM));
  EXPECT_TRUE(WIFEXITED(stopped.status) && WEXITSTATUS(stopped.status) == 0) << stopped.err;
}

// Runs tensorbrokerd on a socket in `dir` (as this process's user); its output once it exits.
absl::StatusOr<ProcessOutput> DaemonIn(const std::string& dir) {
  return RunAs(::geteuid(), ::getegid(),
               {DaemonBinaryPath(), "--config", "/dev/null", "--socket", dir + "/broker.sock",
                "--capacity", "64M", "--log-level", "warning"},
               {});
}

TEST(DaemonSocketDirectoryTest, DaemonRefusesADirectoryOthersMayWrite) {
  struct Case {
    mode_t mode;
    const char* why;
  };
  for (const Case& c : {Case{0777, "writable by others"}, Case{0770, "writable by its group"},
                        Case{01777, "writable by others, sticky like /tmp"}}) {
    TempDir dir("tbident");
    ASSERT_EQ(::chmod(dir.path().c_str(), c.mode), 0);
    ASSERT_OK_AND_ASSIGN(ProcessOutput daemon, DaemonIn(dir.path()));
    EXPECT_TRUE(WIFEXITED(daemon.status) && WEXITSTATUS(daemon.status) == 1)
        << DescribeWaitStatus(daemon.status);
    EXPECT_EQ(daemon.err,
              absl::StrCat("<3>tensorbrokerd: --socket ", dir.path(), "/broker.sock: directory ",
                           dir.path(), " is mode ", absl::StrFormat("%04o", c.mode), " (", c.why,
                           "): another user could replace the socket or take its name first; "
                           "use a directory only its owner may write (mode 0700, or 0750 to let "
                           "a group connect)\n"));
    // Nothing was made there: no lock file, no socket.
    EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << dir.path();
  }
}

// The packaged service's /run/tensorbroker is 0750 (group members reach the socket): served.
TEST(DaemonSocketDirectoryTest, DaemonServesInAGroupReadableDirectory) {
  TempDir dir("tbident");
  ASSERT_EQ(::chmod(dir.path().c_str(), 0750), 0);
  ASSERT_OK_AND_ASSIGN(DaemonProcess daemon, DaemonProcess::StartOn(dir.path() + "/broker.sock"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Client::Connect(daemon.socket_path()));
  EXPECT_OK(client->Ping());
}

}  // namespace
}  // namespace tensorbroker::testing
