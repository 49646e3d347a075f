// One socket path, daemons of two users, one after the other (issue 16): the quick start run as
// root, then the packaged service as its own user, in a directory like /run/tensorbroker (the
// service user's, mode 0750). What one leaves behind (its lock file, after SIGKILL its socket
// files too) the next one replaces, whoever made it, and says so in its log; while one runs, the
// other fails at once naming it by pid and saying how to stop it. A socket that something else
// listens on without the lock (systemd's socket unit while the service is stopped) is never
// replaced, nor connected to. The service user here is uid 65534, made the daemon user with
// $TENSORBROKER_DAEMON_USER as an operator would (the package's user `tensorbroker` is the
// default), so that root's daemon may use its directory and root's client trusts its daemon.
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/server_identity.h"
#include "tests/integration/test_util.h"
#include "tests/integration/uid_process.h"
#include "tests/support/unix_listener.h"

namespace tensorbroker::testing {
namespace {

constexpr uid_t kServiceUid = 65534;  // the packaged service's user, in this test

class SocketOwnershipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "daemons of two users need root";
    std::string t = (std::filesystem::temp_directory_path() / "tbown.XXXXXX").string();
    ASSERT_NE(::mkdtemp(t.data()), nullptr);
    dir_ = t;
    // Like /run/tensorbroker once the package is installed.
    ASSERT_EQ(::chown(dir_.c_str(), kServiceUid, kServiceUid), 0);
    ASSERT_EQ(::chmod(dir_.c_str(), 0750), 0);
    socket_ = dir_ + "/broker.sock";
    ASSERT_EQ(::setenv(kDaemonUserVariable, "65534", 1), 0);  // root's client trusts it too
  }
  void TearDown() override {
    ::unsetenv(kDaemonUserVariable);
    std::error_code ignored;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
  }

  std::vector<std::string> DaemonArgs() const {
    return {DaemonBinaryPath(), "--config", "/dev/null",   "--socket", socket_,
            "--capacity",       "64M",      "--log-level", "info"};
  }
  static std::vector<std::string> Env() { return {"TENSORBROKER_DAEMON_USER=65534"}; }

  absl::StatusOr<UidProcess> StartAs(uid_t uid) {
    auto daemon = UidProcess::Start(uid, uid, DaemonArgs(), Env());
    if (!daemon.ok()) return daemon.status();
    if (absl::Status up = WaitUntilListening(socket_, *daemon); !up.ok()) return up;
    return daemon;
  }
  absl::StatusOr<ProcessOutput> RunAs(uid_t uid) {
    return testing::RunAs(uid, uid, DaemonArgs(), Env());
  }

  // The lock file's owner, mode and content.
  struct FileState {
    uid_t owner = 0;
    mode_t mode = 0;
    std::string content;
  };
  FileState Lock() const {
    FileState state;
    struct stat info {};
    if (::stat((socket_ + ".lock").c_str(), &info) == 0) {
      state.owner = info.st_uid;
      state.mode = info.st_mode & 07777;
    }
    std::ifstream in(socket_ + ".lock");
    std::getline(in, state.content);
    return state;
  }

  // Put and get through the daemon serving the socket: it serves, for root's client too.
  void ExpectRoundTrip(const std::string& name) {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Client::Connect(socket_));
    std::vector<float> values = {1, 2, 3, 4};
    std::vector<int64_t> shape = {4};
    ASSERT_OK(client->Put(name, HostTensor(values.data(), shape, dtypes::kFloat32)));
    ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw, client->Get(name));
    TensorPtr got(raw);
    EXPECT_EQ(FloatsOf(got->dl_tensor), values);
  }

  std::string dir_;
  std::string socket_;
};

// What the second daemon prints when `holder` (a tensorbrokerd run by hand, as `user`) serves:
// the pid, the command and user, any systemd unit this test itself runs in, and how to stop it.
void ExpectRefusalNaming(const ProcessOutput& refused, const std::string& socket, pid_t holder,
                         const std::string& user) {
  EXPECT_TRUE(WIFEXITED(refused.status) && WEXITSTATUS(refused.status) == 1)
      << DescribeWaitStatus(refused.status) << "\n"
      << refused.err;
  const std::regex expected(absl::StrCat(
      "<3>tensorbrokerd: --socket ", socket, " is served by another tensorbrokerd: pid ", holder,
      " \\(tensorbrokerd, user ", user, "(, systemd unit [^)]+)?\\); stop it with `kill ", holder,
      "` \\(it exits cleanly on SIGTERM\\), or choose another --socket\n"));
  EXPECT_TRUE(std::regex_search(refused.err, expected)) << refused.err;
}

TEST_F(SocketOwnershipTest, RootsQuickStartStoppedThenTheServiceUserServesAndEachRefusesTheOther) {
  // The quick start, as root.
  ASSERT_OK_AND_ASSIGN(UidProcess root_daemon, StartAs(0));
  ExpectRoundTrip("quick/x");
  // The service starting meanwhile fails at once, naming root's daemon.
  ASSERT_OK_AND_ASSIGN(ProcessOutput refused, RunAs(kServiceUid));
  ExpectRefusalNaming(refused, socket_, root_daemon.pid(), "root");
  ExpectRoundTrip("quick/y");  // root's daemon unharmed

  // Ctrl-C: root's daemon stops cleanly and leaves its lock file, root's and readable by all.
  const pid_t root_pid = root_daemon.pid();
  ASSERT_OK_AND_ASSIGN(ProcessOutput root_out, root_daemon.Finish(SIGINT));
  EXPECT_TRUE(WIFEXITED(root_out.status) && WEXITSTATUS(root_out.status) == 0) << root_out.err;
  EXPECT_FALSE(std::filesystem::exists(socket_));
  const FileState left = Lock();
  EXPECT_EQ(left.owner, 0u);
  EXPECT_EQ(left.mode, 0644u);
  EXPECT_EQ(left.content, absl::StrCat(root_pid));

  // The service's daemon replaces it and serves.
  ASSERT_OK_AND_ASSIGN(UidProcess service, StartAs(kServiceUid));
  ExpectRoundTrip("service/x");
  const FileState taken = Lock();
  EXPECT_EQ(taken.owner, kServiceUid);
  EXPECT_EQ(taken.mode, 0644u);
  EXPECT_EQ(taken.content, absl::StrCat(service.pid()));

  // The quick start while the service runs fails at once, naming the service's daemon.
  ASSERT_OK_AND_ASSIGN(ProcessOutput refused_root, RunAs(0));
  ExpectRefusalNaming(refused_root, socket_, service.pid(), "nobody");
  ExpectRoundTrip("service/y");

  ASSERT_OK_AND_ASSIGN(ProcessOutput service_out, service.Finish(SIGTERM));
  EXPECT_TRUE(WIFEXITED(service_out.status) && WEXITSTATUS(service_out.status) == 0)
      << service_out.err;
  EXPECT_NE(service_out.err.find(absl::StrCat("<5>replaced the lock file ", socket_,
                                              ".lock left behind by uid 0 (root), pid ", root_pid,
                                              ", which no longer holds it\n")),
            std::string::npos)
      << service_out.err;

  // And the other way round: root's daemon again after the service's.
  ASSERT_OK_AND_ASSIGN(UidProcess again, StartAs(0));
  ExpectRoundTrip("quick/z");
  ASSERT_OK_AND_ASSIGN(ProcessOutput again_out, again.Finish(SIGTERM));
  EXPECT_NE(again_out.err.find(absl::StrCat("<6>took over the lock file ", socket_,
                                            ".lock left behind by uid 65534 (nobody), pid ",
                                            taken.content, ", which no longer holds it\n")),
            std::string::npos)
      << again_out.err;
}

TEST_F(SocketOwnershipTest, SocketFilesAndLockOfAKilledRootDaemonAreReplacedByTheServiceUser) {
  ASSERT_OK_AND_ASSIGN(UidProcess root_daemon, StartAs(0));
  const pid_t root_pid = root_daemon.pid();
  ASSERT_OK_AND_ASSIGN(ProcessOutput killed, root_daemon.Finish(SIGKILL));
  EXPECT_TRUE(WIFSIGNALED(killed.status));
  struct stat left {};
  ASSERT_EQ(::lstat(socket_.c_str(), &left), 0) << "SIGKILL leaves the socket file";
  EXPECT_EQ(left.st_uid, 0u);
  ASSERT_EQ(::lstat((socket_ + ".fd").c_str(), &left), 0);

  ASSERT_OK_AND_ASSIGN(UidProcess service, StartAs(kServiceUid));
  ExpectRoundTrip("after/kill");
  struct stat bound {};
  ASSERT_EQ(::lstat(socket_.c_str(), &bound), 0);
  EXPECT_EQ(bound.st_uid, kServiceUid);
  ASSERT_OK_AND_ASSIGN(ProcessOutput out, service.Finish(SIGTERM));
  EXPECT_TRUE(WIFEXITED(out.status) && WEXITSTATUS(out.status) == 0) << out.err;
  for (const std::string& line :
       {absl::StrCat("<5>replaced the lock file ", socket_,
                     ".lock left behind by uid 0 (root), pid ", root_pid,
                     ", which no longer holds it\n"),
        absl::StrCat("<6>removed the socket file ", socket_,
                     " of uid 0 (root) left behind by a daemon no longer running\n"),
        absl::StrCat("<6>removed the socket file ", socket_,
                     ".fd of uid 0 (root) left behind by a daemon no longer running\n")}) {
    EXPECT_NE(out.err.find(line), std::string::npos) << line << "---\n" << out.err;
  }
}

// Lock files of versions before this one were mode 0600: another user can neither read nor lock
// them, and /proc/locks tells whether one is held.
TEST_F(SocketOwnershipTest, AnUnreadableLockFileIsJudgedByProcLocks) {
  const std::string lock_path = socket_ + ".lock";
  UniqueFd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  ASSERT_TRUE(lock.valid());
  ASSERT_EQ(::fchmod(lock.get(), 0600), 0);
  ASSERT_EQ(::write(lock.get(), "99999", 5), 5);

  // Held (by this test, as a live daemon of the old version would): refused, naming this pid.
  ASSERT_EQ(::flock(lock.get(), LOCK_EX | LOCK_NB), 0);
  ASSERT_OK_AND_ASSIGN(ProcessOutput refused, RunAs(kServiceUid));
  EXPECT_TRUE(WIFEXITED(refused.status) && WEXITSTATUS(refused.status) == 1) << refused.err;
  EXPECT_NE(refused.err.find(absl::StrCat("is served by another tensorbrokerd: pid ", ::getpid(),
                                          " (integration_tes, user root")),
            std::string::npos)
      << refused.err;
  EXPECT_EQ(Lock().owner, 0u);

  // Not held: replaced.
  ASSERT_EQ(::flock(lock.get(), LOCK_UN), 0);
  ASSERT_OK_AND_ASSIGN(UidProcess service, StartAs(kServiceUid));
  ExpectRoundTrip("after/legacy");
  EXPECT_EQ(Lock().owner, kServiceUid);
  EXPECT_EQ(Lock().content, absl::StrCat(service.pid()));
  ASSERT_OK_AND_ASSIGN(ProcessOutput out, service.Finish(SIGTERM));
  EXPECT_NE(out.err.find(absl::StrCat("<5>replaced the lock file ", lock_path,
                                      " left behind by uid 0 (root), which no longer holds it\n")),
            std::string::npos)
      << out.err;
}

// A listener bound at the socket path without the lock: what systemd's tensorbrokerd.socket is
// while the service is stopped (here a socket of this test's, as root like systemd).
TEST_F(SocketOwnershipTest, ASocketSomethingListensOnWithoutTheLockIsNeitherReplacedNorTouched) {
  UniqueFd listener = ListenOnUnixSocket(socket_);
  ASSERT_TRUE(listener.valid());
  struct stat before {};
  ASSERT_EQ(::lstat(socket_.c_str(), &before), 0);

  ASSERT_OK_AND_ASSIGN(ProcessOutput refused, RunAs(0));
  EXPECT_TRUE(WIFEXITED(refused.status) && WEXITSTATUS(refused.status) == 1) << refused.err;
  const std::regex expected(absl::StrCat(
      "<3>tensorbrokerd: --socket ", socket_, ": a socket there is served by pid ", ::getpid(),
      " \\(integration_tes, user root(, systemd unit [^)]+)?\\), though no tensorbrokerd holds its "
      "lock; stop it with `kill ",
      ::getpid(), "`, or choose another --socket\n"));
  EXPECT_TRUE(std::regex_search(refused.err, expected)) << refused.err;

  // The listener's file is still there, the same one, and nobody connected to it (connecting to
  // a socket unit would start its service).
  struct stat after {};
  ASSERT_EQ(::lstat(socket_.c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);
  EXPECT_LT(::accept(listener.get(), nullptr, nullptr), 0);
  EXPECT_EQ(errno, EAGAIN);
  // The local channel's socket, bound before the refusal, went with the daemon.
  EXPECT_FALSE(std::filesystem::exists(socket_ + ".fd"));
}

// A socket unit started while a daemon run by hand serves binds the path anew; when that daemon
// stops, it must not remove the socket unit's file.
TEST_F(SocketOwnershipTest, ADaemonRemovesOnlyTheSocketFileItBound) {
  ASSERT_OK_AND_ASSIGN(UidProcess daemon, StartAs(0));
  ASSERT_EQ(::unlink(socket_.c_str()), 0);
  UniqueFd listener = ListenOnUnixSocket(socket_);
  ASSERT_TRUE(listener.valid());
  struct stat rebound {};
  ASSERT_EQ(::lstat(socket_.c_str(), &rebound), 0);

  ASSERT_OK_AND_ASSIGN(ProcessOutput out, daemon.Finish(SIGTERM));
  EXPECT_TRUE(WIFEXITED(out.status) && WEXITSTATUS(out.status) == 0) << out.err;
  struct stat after {};
  ASSERT_EQ(::lstat(socket_.c_str(), &after), 0) << "the daemon removed a socket file not its own";
  EXPECT_EQ(after.st_ino, rebound.st_ino);
  EXPECT_FALSE(std::filesystem::exists(socket_ + ".fd"));  // its own, removed
}

}  // namespace
}  // namespace tensorbroker::testing
