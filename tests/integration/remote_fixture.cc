#include "tests/integration/remote_fixture.h"

#include <fstream>

#include "absl/strings/str_cat.h"

namespace tensorbroker::testing {

void TwoBrokersTest::SetUp() {
  auto pki = TestPki::Make();
  ASSERT_TRUE(pki.ok()) << pki.status();
  pki_ = *std::move(pki);
  ASSERT_NO_FATAL_FAILURE(StartOrigin());
  ASSERT_NO_FATAL_FAILURE(StartHere(HereFlags()));
}

void TwoBrokersTest::StartOrigin(int port) {
  at_origin_.reset();
  origin_.reset();
  // Its user administers the origin: the origin's Stats show what each peer fetched.
  auto serving = StartServingPeers(*pki_, "broker-a", {}, port);
  ASSERT_TRUE(serving.ok()) << serving.status();
  origin_ = std::move(serving->daemon);
  peer_ = absl::StrCat("127.0.0.1:", serving->port);
  auto at_origin = Client::Connect(origin_->socket_path());
  ASSERT_TRUE(at_origin.ok()) << at_origin.status();
  at_origin_ = *std::move(at_origin);
}

void TwoBrokersTest::StartHere(const std::vector<std::string>& extra) {
  at_here_.reset();
  here_.reset();
  const std::string config = pki_->File("b.conf");
  std::ofstream(config) << "remote[shared/] = " << peer_ << "\n"
                        << "tls-cert = " << pki_->File("broker-b.crt") << "\n"
                        << "tls-key = " << pki_->File("broker-b.key") << "\n"
                        << "tls-ca = " << pki_->File("ca.crt") << "\n";
  std::vector<std::string> flags = {"--config", config};
  flags.insert(flags.end(), extra.begin(), extra.end());
  auto here = DaemonProcess::Start(flags);
  ASSERT_TRUE(here.ok()) << here.status();
  here_ = std::make_unique<DaemonProcess>(*std::move(here));
  auto at_here = Client::Connect(here_->socket_path());
  ASSERT_TRUE(at_here.ok()) << at_here.status();
  at_here_ = *std::move(at_here);
}

std::pair<uint64_t, uint64_t> TwoBrokersTest::OriginSentToB() {
  auto stats = at_origin_->Stats();
  EXPECT_TRUE(stats.ok()) << stats.status();
  std::pair<uint64_t, uint64_t> sent = {0, 0};
  if (!stats.ok()) return sent;
  for (const MethodStats& method : stats->methods) {
    if (method.method != "Read") continue;
    for (const auto& [code, count] : method.calls) sent.first += count;
  }
  for (const PeerUsage& peer : stats->peers) {
    if (peer.peer == "broker-b") sent.second = peer.sent_bytes;
  }
  return sent;
}

RemoteUsage TwoBrokersTest::HereFromOrigin() {
  auto stats = at_here_->Stats();
  EXPECT_TRUE(stats.ok()) << stats.status();
  if (stats.ok()) {
    for (const RemoteUsage& remote : stats->remotes) {
      if (remote.peer == peer_) return remote;
    }
  }
  RemoteUsage none;
  none.peer = peer_;
  return none;
}

}  // namespace tensorbroker::testing
