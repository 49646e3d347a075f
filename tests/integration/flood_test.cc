// A hostile local user that asks for descriptors and never reads them (issue 30): uid 65534,
// in the socket's group, opens every connection --max-connections allows and floods each with
// FetchSegment requests (tensorbroker_flood_peer). Before back-pressure, six such connections
// held the daemon's 20,000 descriptors in unread replies and took it down.
//
// While it floods: root's client keeps publishing and reading back, `tensorbroker health`
// answers SERVING, and the daemon's open descriptors stay within its baseline plus one per
// connection (the sockets themselves) plus kSlack: a queued reply holds no descriptor, and the
// daemon reads no request of a connection whose replies wait. When the attacker reads, every
// reply it is owed comes (none dropped); when it exits, the daemon holds no more descriptors
// than at its baseline (root's tensors are the same names as when the baseline was taken).
//
// ShortOfDescriptorsTest: under a descriptor limit of 600, uid 65534 makes mutable tensors (a
// segment each) until the daemon refuses (and then refuses it a lease table too), with the
// reserve (descriptor_reserve.h) still free:
// the daemon's own uid connects, checks health and publishes; another uid's new connection is
// closed while the daemon is short, and served again once the tensors are gone.
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "daemon/base/descriptor_reserve.h"
#include "tests/integration/stderr_report.h"
#include "tests/integration/test_util.h"
#include "tests/integration/uid_process.h"
#include "tests/support/process_footprint.h"

namespace tensorbroker::testing {
namespace {

constexpr int kMaxConnections = 32;
// Descriptors the daemon may open beyond one per connection while it serves (a segment for a
// new tensor, a record, a gRPC connection of root's client, the CLI's health check).
constexpr size_t kSlack = 24;

// The anonymous memory of process `pid` in KiB (its own heap: what a client could make grow).
std::string RssAnonKib(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (absl::StartsWith(line, "RssAnon:")) {
      return std::string(absl::StripAsciiWhitespace(line.substr(8)));
    }
  }
  return "?";
}

size_t OpenDescriptors(pid_t pid) { return FootprintOf(pid).fds; }

class FloodTest : public BrokerTest {
 protected:
  std::vector<std::string> ExtraArgs() const override {
    return {"--log-level", "error", "--max-connections", std::to_string(kMaxConnections)};
  }
};

TEST_F(FloodTest, AnotherUidFloodingDescriptorRequestsCannotTakeTheDaemonDown) {
  if (::geteuid() != 0) GTEST_SKIP() << "switching to uid 65534 needs root";
  const std::vector<float> bait = {1, 2, 3, 4};
  ASSERT_OK(PutFloats(client(), "flood/bait", bait));  // readable by anyone
  PutOptions replace;
  replace.replace = true;
  ASSERT_OK(PutFloats(client(), "flood/root", {0}, replace));  // root's own, replaced below
  const std::string dir = std::filesystem::path(socket()).parent_path().string();
  ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
  const pid_t daemon_pid = daemon_->pid();
  ASSERT_TRUE(PollUntil([&] { return OpenDescriptors(daemon_pid) > 0; }));
  const size_t baseline = OpenDescriptors(daemon_pid);
  const std::string anon_before = RssAnonKib(daemon_pid);

  ASSERT_OK_AND_ASSIGN(
      UidProcess attacker,
      UidProcess::Start(
          65534, 0,
          {TENSORBROKER_FLOOD_PEER_PATH, "--socket", socket(), "--name", "flood/bait",
           "--connections", std::to_string(kMaxConnections + 8), "--requests", "20000"},
          {}));
  ASSERT_TRUE(PollUntil([&] { return ReportLines(attacker.ErrSoFar()).count("flooding") > 0; },
                        std::chrono::seconds(120)))
      << attacker.ErrSoFar();
  std::map<std::string, std::string> said = ReportLines(attacker.ErrSoFar());
  ASSERT_EQ(said["uid"], "65534");
  // Every place root's own client (one local-channel connection) left it, and no more.
  EXPECT_EQ(said["connected"], std::to_string(kMaxConnections - 1));
  EXPECT_EQ(said["refused"], "9");
  size_t requests = 0;
  ASSERT_TRUE(absl::SimpleAtoi(said["requests"], &requests)) << said["requests"];
  EXPECT_GT(requests, static_cast<size_t>(kMaxConnections));  // every socket was filled

  // While the attacker holds everything unread, root is served and the daemon is healthy.
  const size_t bound = baseline + kMaxConnections + kSlack;
  size_t most = 0;
  for (int round = 0; round < 20; ++round) {
    most = std::max(most, OpenDescriptors(daemon_pid));
    const std::vector<float> values = {static_cast<float>(round), 0.5f, -1.0f};
    ASSERT_OK(PutFloats(client(), "flood/root", values, replace));
    ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw, client().Get("flood/root"));
    TensorPtr got(raw);
    EXPECT_EQ(FloatsOf(got->dl_tensor), values);
    if (round % 5 == 0) {
      ASSERT_OK_AND_ASSIGN(
          ProcessOutput health,
          RunAs(0, 0, {TENSORBROKER_CLI_PATH, "--socket", socket(), "health"}, {}));
      EXPECT_EQ(health.out, "SERVING\n") << health.err;
      EXPECT_TRUE(WIFEXITED(health.status) && WEXITSTATUS(health.status) == 0) << health.err;
    }
    most = std::max(most, OpenDescriptors(daemon_pid));
  }
  EXPECT_LE(most, bound) << "baseline " << baseline;
  std::cout << "flood: baseline " << baseline << " descriptors, at most " << most << " while "
            << said["connected"] << " connections flooded " << requests << " requests (bound "
            << bound << ")\n";

  // Every reply the attacker is owed comes once it reads: nothing dropped, one descriptor each.
  ASSERT_OK_AND_ASSIGN(ProcessOutput finished, attacker.Finish(SIGUSR1));
  said = ReportLines(finished.err);
  ASSERT_TRUE(WIFEXITED(finished.status) && WEXITSTATUS(finished.status) == 0) << finished.err;
  EXPECT_EQ(said["drained"],
            absl::StrCat("replies=", requests, " ok=", requests, " fds=", requests, " dropped=0"));
  ASSERT_EQ(said.count("done"), 1u) << finished.err;

  // The victim's bytes are intact and the daemon holds no more than its baseline.
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw, client().Get("flood/bait"));
  TensorPtr bait_again(raw);
  EXPECT_EQ(FloatsOf(bait_again->dl_tensor), bait);
  // At most the baseline: what gRPC keeps open for a while (a connection's descriptors, its
  // timers) may have been counted in it, and gone since (a TSan run: 27, then 23).
  EXPECT_TRUE(
      PollUntil([&] { return OpenDescriptors(daemon_pid) <= baseline; }, std::chrono::seconds(10)))
      << OpenDescriptors(daemon_pid) << " open, baseline " << baseline;
  EXPECT_OK(client().Ping());
  // A figure, not a check (sanitizer builds keep freed memory in quarantine): queued replies
  // used to hold the daemon's heap too.
  std::cout << "flood: the daemon's anonymous memory " << anon_before << " before, "
            << RssAnonKib(daemon_pid) << " after\n";
}

// A daemon under a descriptor limit of kLimit (RLIMIT_NOFILE, lowered once it runs).
class ShortOfDescriptorsTest : public BrokerTest {
 protected:
  static constexpr rlim_t kLimit = 600;
  void SetUp() override {
    BrokerTest::SetUp();
    if (HasFatalFailure()) return;
    const rlimit low{kLimit, kLimit};
    ASSERT_EQ(::prlimit(daemon_->pid(), RLIMIT_NOFILE, &low, nullptr), 0) << std::strerror(errno);
  }
};

TEST_F(ShortOfDescriptorsTest, AnotherUidsTensorsLeaveTheDaemonDescriptorsForItsOwnWork) {
  if (::geteuid() != 0) GTEST_SKIP() << "switching to uid 65534 needs root";
  const std::string dir = std::filesystem::path(socket()).parent_path().string();
  ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
  const pid_t daemon_pid = daemon_->pid();
  // Mutable tensors, each a segment of its own, until the daemon refuses.
  ASSERT_OK_AND_ASSIGN(ProcessOutput attack, RunAs(65534, 0,
                                                   {TENSORBROKER_FLOOD_PEER_PATH, "--socket",
                                                    socket(), "--tensors", std::to_string(kLimit)},
                                                   {}));
  std::map<std::string, std::string> said = ReportLines(attack.err);
  ASSERT_TRUE(WIFEXITED(attack.status) && WEXITSTATUS(attack.status) == 0) << attack.err;
  ASSERT_EQ(said["uid"], "65534");
  EXPECT_EQ(said["refused"],
            absl::StrCat("code=", static_cast<int>(absl::StatusCode::kResourceExhausted),
                         " name: the daemon is out of descriptors to spare (it keeps the last ",
                         daemon::kDescriptorReserve, " of its ", kLimit,
                         " for its own work); try again when tensors or connections have gone"))
      << attack.err;
  EXPECT_EQ(said["fast_reads"],
            absl::StrCat("code=", static_cast<int>(absl::StatusCode::kResourceExhausted),
                         " open_fast_reads: the daemon is out of descriptors to spare (it keeps "
                         "the last ",
                         daemon::kDescriptorReserve, " of its ", kLimit,
                         " for its own work); try again when tensors or connections have gone"))
      << attack.err;
  size_t created = 0;
  ASSERT_TRUE(absl::SimpleAtoi(said["created"], &created)) << attack.err;
  EXPECT_GT(created, 0u);
  const size_t open = OpenDescriptors(daemon_pid);
  EXPECT_LE(open + daemon::kDescriptorReserve, kLimit + 2) << open << " open";
  std::cout << "short of descriptors: uid 65534 made " << created
            << " tensors before the daemon refused; " << open << " of " << kLimit
            << " descriptors open\n";

  // The daemon's own uid is served in full: health, new connections, tensors.
  for (int round = 0; round < 3; ++round) {
    ASSERT_OK_AND_ASSIGN(ProcessOutput health,
                         RunAs(0, 0, {TENSORBROKER_CLI_PATH, "--socket", socket(), "health"}, {}));
    EXPECT_EQ(health.out, "SERVING\n") << health.err;
    std::unique_ptr<Client> other = NewClient();
    ASSERT_NE(other, nullptr);
    const std::vector<float> values = {1.5f, static_cast<float>(round)};
    ASSERT_OK(PutFloats(*other, absl::StrCat("root/", round), values));
    ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw, other->Get(absl::StrCat("root/", round)));
    TensorPtr got(raw);
    EXPECT_EQ(FloatsOf(got->dl_tensor), values);
  }
  // Another uid's new connection is closed at once while the daemon is short.
  ASSERT_OK_AND_ASSIGN(ProcessOutput again,
                       RunAs(65534, 0, {TENSORBROKER_CLI_PATH, "--socket", socket(), "ls"}, {}));
  EXPECT_FALSE(WIFEXITED(again.status) && WEXITSTATUS(again.status) == 0) << again.out;
  // Its tensors gone, the other uid is served again.
  for (size_t i = 0; i < created; ++i) ASSERT_OK(client().Delete(absl::StrCat("flood/t/", i)));
  ASSERT_OK_AND_ASSIGN(ProcessOutput listed,
                       RunAs(65534, 0, {TENSORBROKER_CLI_PATH, "--socket", socket(), "ls"}, {}));
  EXPECT_TRUE(WIFEXITED(listed.status) && WEXITSTATUS(listed.status) == 0) << listed.err;
}

}  // namespace
}  // namespace tensorbroker::testing
