// A remote prefix whose address is a DNS name standing for several brokers (a Kubernetes
// headless Service): broker B asks each address the name resolves to, and the first that has
// the tensor serves it; each broker it fetched from is watched on its own. Here the name is
// "localhost", which broker B alone (in its own mount namespace: `unshare --mount`, a hosts file
// bound over /etc/hosts) resolves to 127.0.0.1 and 127.0.0.2, where broker-a and broker-c serve
// peers on one port; their certificates carry the DNS name localhost, as a Service's brokers'
// carry the Service's name. Needs root for the mount namespace (skipped, saying so, without).
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tensorbroker/client.h"
#include "tests/integration/peer_fixture.h"
#include "tests/integration/test_util.h"
#include "tests/support/subprocess.h"

namespace tensorbroker::testing {
namespace {

constexpr size_t kBytes = 1 << 20;

// Whether this process may make a mount namespace and bind a file in it (root, and a kernel or
// sandbox that allows it); why not when it may not.
std::optional<std::string> WhyNoMountNamespace() {
  SubprocessOptions options;
  options.capture_stdout = true;
  options.capture_stderr = true;
  auto tried = Subprocess::Spawn(
      {"/usr/bin/unshare", "--mount", "sh", "-c", "mount --bind /dev/null /etc/hostname"}, options);
  if (!tried.ok()) return std::string(tried.status().message());
  auto done = tried->Finish(absl::Seconds(30));
  if (!done.ok()) return std::string(done.status().message());
  if (WIFEXITED(done->status) && WEXITSTATUS(done->status) == 0) return std::nullopt;
  return absl::StrCat("unshare --mount / mount --bind failed here: ", done->err);
}

class SeveralOriginsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto why = WhyNoMountNamespace(); why.has_value()) {
      GTEST_SKIP() << "broker B needs its own /etc/hosts (a mount namespace): " << *why;
    }
    auto pki = TestPki::Make({"broker-a", "broker-b", "broker-c"});
    ASSERT_TRUE(pki.ok()) << pki.status();
    pki_ = *std::move(pki);
    ASSERT_NO_FATAL_FAILURE(StartOrigin("broker-a", "127.0.0.1", &a_, &at_a_));
    ASSERT_NO_FATAL_FAILURE(StartOrigin("broker-c", "127.0.0.2", &c_, &at_c_));
    const std::string hosts = pki_->File("hosts");
    std::ofstream(hosts) << "127.0.0.1 localhost\n127.0.0.2 localhost\n";
    peer_ = absl::StrCat("localhost:", port_);
    const std::string config = pki_->File("b.conf");
    std::ofstream(config) << "remote[shared/] = " << peer_ << "\n"
                          << "tls-cert = " << pki_->File("broker-b.crt") << "\n"
                          << "tls-key = " << pki_->File("broker-b.key") << "\n"
                          << "tls-ca = " << pki_->File("ca.crt") << "\n";
    auto here = DaemonProcess::Start({"--config", config},
                                     {"/usr/bin/unshare", "--mount", "sh", "-c",
                                      "mount --bind \"$0\" /etc/hosts && exec \"$@\"", hosts});
    ASSERT_TRUE(here.ok()) << here.status();
    here_ = std::make_unique<DaemonProcess>(*std::move(here));
    auto at_here = Client::Connect(here_->socket_path());
    ASSERT_TRUE(at_here.ok()) << at_here.status();
    at_here_ = *std::move(at_here);
  }

  // An origin serving peers as `broker` on `host`, on the port the first one took.
  void StartOrigin(const std::string& broker, const std::string& host,
                   std::unique_ptr<DaemonProcess>* daemon, std::unique_ptr<Client>* client) {
    auto serving = StartServingPeers(*pki_, broker, {}, port_, host);
    ASSERT_TRUE(serving.ok()) << serving.status();
    *daemon = std::move(serving->daemon);
    port_ = serving->port;
    auto connected = Client::Connect((*daemon)->socket_path());
    ASSERT_TRUE(connected.ok()) << connected.status();
    *client = *std::move(connected);
  }

  // A Get here of `name` newer than `after` (up to 30 s): its bytes, and its origin's version.
  struct Got {
    std::vector<uint8_t> bytes;
    uint64_t version = 0;
    uint64_t origin_version = 0;
  };
  absl::StatusOr<Got> GetHere(const std::string& name, std::optional<uint64_t> after) {
    GetOptions options;
    options.timeout = std::chrono::seconds(30);
    options.after_version = after;
    auto got = at_here_->Get(name, options);
    if (!got.ok()) return got.status();
    TensorPtr tensor(*got);
    auto info = at_here_->Stat(name);
    if (!info.ok()) return info.status();
    if (!info->origin.has_value()) return absl::InternalError(name + " is no replica");
    return Got{BytesOf(tensor->dl_tensor), info->version, info->origin->version};
  }

  std::unique_ptr<TestPki> pki_;
  int port_ = 0;
  std::string peer_;
  std::unique_ptr<DaemonProcess> a_, c_, here_;
  std::unique_ptr<Client> at_a_, at_c_, at_here_;
};

TEST_F(SeveralOriginsTest, EachNameComesFromTheBrokerBehindTheNameThatHasIt) {
  const std::vector<uint8_t> from_a = PutStamped(*at_a_, "shared/on-a", {"*"}, kBytes, 1);
  const std::vector<uint8_t> from_c = PutStamped(*at_c_, "shared/on-c", {"*"}, kBytes, 2);
  ASSERT_OK_AND_ASSIGN(Got got_a, GetHere("shared/on-a", std::nullopt));
  EXPECT_TRUE(got_a.bytes == from_a);
  ASSERT_OK_AND_ASSIGN(Got got_c, GetHere("shared/on-c", std::nullopt));
  EXPECT_TRUE(got_c.bytes == from_c);
  EXPECT_OK(here_->WaitForLogLine(
      absl::StrCat("'shared/on-a' fetched from peer ", peer_, " (ipv4:127.0.0.1:", port_, ")")));
  EXPECT_OK(here_->WaitForLogLine(
      absl::StrCat("'shared/on-c' fetched from peer ", peer_, " (ipv4:127.0.0.2:", port_, ")")));
  ASSERT_OK_AND_ASSIGN(TensorInfo replica, at_here_->Stat("shared/on-c"));
  ASSERT_TRUE(replica.origin.has_value());
  EXPECT_EQ(replica.origin->peer, peer_);
  // A name neither has: NOT_FOUND, naming the address asked.
  GetOptions now;
  now.timeout = std::chrono::seconds(0);
  const absl::Status missing = at_here_->Get("shared/nowhere", now).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound) << missing;
  EXPECT_NE(std::string(missing.message()).find(peer_), std::string::npos) << missing;
}

TEST_F(SeveralOriginsTest, EachBrokerBehindTheNameIsWatchedOnItsOwn) {
  PutStamped(*at_a_, "shared/on-a", {"*"}, kBytes, 1);
  PutStamped(*at_c_, "shared/on-c", {"*"}, kBytes, 2);
  ASSERT_OK_AND_ASSIGN(Got first_a, GetHere("shared/on-a", std::nullopt));
  ASSERT_OK_AND_ASSIGN(Got first_c, GetHere("shared/on-c", std::nullopt));
  for (const char* host : {"127.0.0.1", "127.0.0.2"}) {
    EXPECT_OK(here_->WaitForLogLine(absl::StrCat("the watch of 'shared/' at peer ", peer_,
                                                 " (ipv4:", host, ":", port_, ") follows")));
  }
  // A replace on broker-c reaches the replica here (its watch), broker-a's untouched.
  const std::vector<uint8_t> newer =
      PutStamped(*at_c_, "shared/on-c", {"*"}, kBytes, 9, false, /*replace=*/true);
  ASSERT_OK_AND_ASSIGN(Got next_c, GetHere("shared/on-c", first_c.version));
  EXPECT_TRUE(next_c.bytes == newer);
  EXPECT_GT(next_c.origin_version, first_c.origin_version);
  // A delete on broker-a unpublishes its replica here (the other watch); broker-c's stays.
  EXPECT_OK(at_a_->Delete("shared/on-a"));
  EXPECT_TRUE(PollUntil(
      [&] { return at_here_->Stat("shared/on-a").status().code() == absl::StatusCode::kNotFound; },
      std::chrono::seconds(30)));
  ASSERT_OK_AND_ASSIGN(Got still_c, GetHere("shared/on-c", std::nullopt));
  EXPECT_TRUE(still_c.bytes == newer);
  EXPECT_EQ(still_c.version, next_c.version);
  EXPECT_NE(first_a.version, 0u);
}

}  // namespace
}  // namespace tensorbroker::testing
