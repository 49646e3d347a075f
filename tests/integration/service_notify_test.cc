// The daemon as a systemd Type=notify service, against a fake service manager: the test binds
// the datagram socket that $NOTIFY_SOCKET names and reads what tensorbrokerd sends. READY=1
// comes only once the socket serves, WATCHDOG=1 pings arrive at least as often as
// $WATCHDOG_USEC asks, STATUS= says what the broker holds, and SIGTERM brings STOPPING=1.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "tests/integration/test_util.h"

namespace tensorbroker::testing {
namespace {

using Clock = std::chrono::steady_clock;

struct Message {
  Clock::time_point at;
  std::string text;
};

// The service manager's end: a bound AF_UNIX datagram socket in a temporary directory.
class FakeServiceManager {
 public:
  FakeServiceManager() {
    char dir[] = "/tmp/tbnotify.XXXXXX";
    dir_ = ::mkdtemp(dir);
    path_ = dir_ + "/notify.sock";
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    path_.copy(address.sun_path, sizeof(address.sun_path) - 1);
    bound_ = ::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  }
  ~FakeServiceManager() {
    ::close(fd_);
    ::unlink(path_.c_str());
    ::rmdir(dir_.c_str());
  }
  bool bound() const { return bound_; }
  const std::string& path() const { return path_; }

  // Every message that arrives within `window` (each read waits at most what is left of it).
  std::vector<Message> Collect(std::chrono::milliseconds window) {
    std::vector<Message> messages;
    const auto end = Clock::now() + window;
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::microseconds>(end - Clock::now());
      if (left.count() <= 0) break;
      timeval timeout{static_cast<time_t>(left.count() / 1000000),
                      static_cast<suseconds_t>(left.count() % 1000000)};
      ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
      char buffer[4096];
      const ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
      if (n < 0) break;  // timed out
      messages.push_back({Clock::now(), std::string(buffer, static_cast<size_t>(n))});
    }
    return messages;
  }

 private:
  std::string dir_;
  std::string path_;
  int fd_ = -1;
  bool bound_ = false;
};

// Starts a daemon with the service manager's environment (the child inherits it).
absl::StatusOr<DaemonProcess> StartUnderFakeSystemd(const FakeServiceManager& manager,
                                                    const char* watchdog_usec) {
  ::setenv("NOTIFY_SOCKET", manager.path().c_str(), 1);
  if (watchdog_usec != nullptr) ::setenv("WATCHDOG_USEC", watchdog_usec, 1);
  auto daemon = DaemonProcess::Start({"--log-level", "warning"});
  ::unsetenv("NOTIFY_SOCKET");
  ::unsetenv("WATCHDOG_USEC");
  return daemon;
}

TEST(ServiceNotifyTest, ReadyOnlyWhenServingWatchdogAtTheAskedRateStoppingOnSigterm) {
  FakeServiceManager manager;
  ASSERT_TRUE(manager.bound());
  // Pings due at least every 4 s: the daemon pings every 2 s, each after a health check that
  // must answer within those 2 s. (A shorter timeout would leave a loaded machine's scheduling
  // less slack than the check needs: with 1 s, a check slower than 500 ms missed a ping.)
  constexpr auto kWatchdog = std::chrono::seconds(4);
  ASSERT_OK_AND_ASSIGN(DaemonProcess daemon, StartUnderFakeSystemd(manager, "4000000"));
  std::vector<Message> messages = manager.Collect(std::chrono::milliseconds(7000));
  ASSERT_FALSE(messages.empty());
  // The first message is READY=1 (with a STATUS= line); by then the socket serves, since
  // DaemonProcess::Start returned only after a Ping succeeded and READY was already queued.
  EXPECT_TRUE(absl::StartsWith(messages[0].text, "READY=1\nSTATUS=serving on "))
      << messages[0].text;
  size_t ready = 0;
  std::vector<Clock::time_point> pings;
  bool status_with_counts = false;
  for (const Message& m : messages) {
    ready += absl::StrContains(m.text, "READY=1") ? 1 : 0;
    if (m.text == "WATCHDOG=1") pings.push_back(m.at);
    status_with_counts |= absl::StartsWith(m.text, "STATUS=serving 0 tensor(s), ");
  }
  EXPECT_EQ(ready, 1u);
  EXPECT_TRUE(status_with_counts);
  // Every half timeout after a health check: over 7 s, at least 3 pings (4 when nothing is
  // late), never a gap as long as the timeout itself (systemd would kill the service then).
  ASSERT_GE(pings.size(), 3u);
  for (size_t i = 1; i < pings.size(); ++i) {
    EXPECT_LT(pings[i] - pings[i - 1], kWatchdog) << "gap before ping " << i;
  }
  // The status follows what the broker holds.
  auto client = Client::Connect(daemon.socket_path());
  ASSERT_OK(client);
  float values[3] = {1, 2, 3};
  std::vector<int64_t> shape = {3};
  ASSERT_OK((*client)->Put("notify/x", HostTensor(values, shape, dtypes::kFloat32)));
  // With the next ping's status (at most 2 s on, 3 s of slack).
  std::vector<Message> later = manager.Collect(std::chrono::milliseconds(5000));
  bool counts_one = false;
  for (const Message& m : later)
    counts_one |= absl::StartsWith(m.text, "STATUS=serving 1 tensor(s)");
  EXPECT_TRUE(counts_one);
  client->reset();

  ASSERT_OK_AND_ASSIGN(int wait_status, daemon.Stop());
  EXPECT_TRUE(WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0);
  std::vector<Message> last = manager.Collect(std::chrono::milliseconds(200));
  bool stopping = false;
  for (const Message& m : last) stopping |= absl::StartsWith(m.text, "STOPPING=1");
  EXPECT_TRUE(stopping);
}

TEST(ServiceNotifyTest, WithoutAWatchdogOnlyReadyStatusAndStopping) {
  FakeServiceManager manager;
  ASSERT_TRUE(manager.bound());
  ASSERT_OK_AND_ASSIGN(DaemonProcess daemon, StartUnderFakeSystemd(manager, nullptr));
  std::vector<Message> messages = manager.Collect(std::chrono::milliseconds(1000));
  ASSERT_FALSE(messages.empty());
  EXPECT_TRUE(absl::StartsWith(messages[0].text, "READY=1")) << messages[0].text;
  for (const Message& m : messages) EXPECT_NE(m.text, "WATCHDOG=1");
  ASSERT_OK(daemon.Stop());
  bool stopping = false;
  for (const Message& m : manager.Collect(std::chrono::milliseconds(200))) {
    stopping |= absl::StartsWith(m.text, "STOPPING=1");
  }
  EXPECT_TRUE(stopping);
}

}  // namespace
}  // namespace tensorbroker::testing
