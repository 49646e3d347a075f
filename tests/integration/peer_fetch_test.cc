// The data plane between brokers (daemon/remote/grpc_transfer): a broker's fetch of a peer's
// tensor over mutual TLS into memory it provides. Real daemon as the origin, real TLS with
// certificates made by the test; the fetching side is the daemon's own GrpcTransfer.
#include <signal.h>

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "daemon/remote/grpc_transfer.h"
#include "daemon/remote/peer_address.h"
#include "tensorbroker/client.h"
#include "tests/integration/peer_fixture.h"
#include "tests/integration/test_util.h"
#include "tests/support/host_tensor.h"

namespace tensorbroker::testing {
namespace {

using daemon::GrpcTransfer;
using daemon::PeerChannels;
using daemon::PeerEndpoint;
using daemon::RemoteTensorInfo;

class PeerFetchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pki = TestPki::Make();
    ASSERT_TRUE(pki.ok()) << pki.status();
    pki_ = *std::move(pki);
    auto serving = StartServingPeers(*pki_, "broker-a");
    ASSERT_TRUE(serving.ok()) << serving.status();
    origin_ = std::move(serving->daemon);
    port_ = serving->port;
    auto client = Client::Connect(origin_->socket_path());
    ASSERT_TRUE(client.ok()) << client.status();
    local_ = *std::move(client);
    auto tls = daemon::LoadPeerTls(
        {pki_->File("broker-b.crt"), pki_->File("broker-b.key"), pki_->File("ca.crt")});
    ASSERT_TRUE(tls.ok()) << tls.status();
    channels_ = std::make_unique<PeerChannels>(*tls);
    transfer_ = std::make_unique<GrpcTransfer>(channels_.get());
  }

  PeerEndpoint Origin(const std::string& tls_name = "broker-a") const {
    return {absl::StrCat("ipv4:127.0.0.1:", port_), tls_name, absl::StrCat("127.0.0.1:", port_)};
  }

  // Publishes `size` bytes counting from `seed`; returns them.
  std::vector<uint8_t> Publish(const std::string& name, std::vector<std::string> readers,
                               size_t size, uint8_t seed = 5, bool is_mutable = false) {
    return PutStamped(*local_, name, std::move(readers), size, seed, is_mutable);
  }

  // Fetches `name` from the origin into a vector of its own.
  absl::StatusOr<RemoteTensorInfo> FetchInto(std::vector<uint8_t>* out, const PeerEndpoint& peer,
                                             const std::string& name) {
    return transfer_->Fetch(
        peer, name,
        [out](const RemoteTensorInfo& info) -> absl::StatusOr<absl::Span<uint8_t>> {
          out->assign(info.spec.nbytes, 0);
          return absl::MakeSpan(*out);
        },
        absl::Seconds(60));
  }

  std::unique_ptr<TestPki> pki_;
  std::unique_ptr<DaemonProcess> origin_;
  int port_ = 0;
  std::unique_ptr<Client> local_;
  std::unique_ptr<PeerChannels> channels_;
  std::unique_ptr<GrpcTransfer> transfer_;
};

TEST_F(PeerFetchTest, EveryByteOfATensorThePeerMayReadArrives) {
  // 5 MiB and 3 bytes: five whole 1 MiB chunks and a short one.
  const std::vector<uint8_t> bytes =
      Publish("shared/w", {"peer:broker-b", "uid:1000"}, (5 << 20) + 3);
  ASSERT_OK_AND_ASSIGN(TensorInfo stat, local_->Stat("shared/w"));
  std::vector<uint8_t> fetched;
  ASSERT_OK_AND_ASSIGN(RemoteTensorInfo info, FetchInto(&fetched, Origin(), "shared/w"));
  EXPECT_TRUE(fetched == bytes);
  EXPECT_EQ(info.version, stat.version);
  EXPECT_EQ(info.spec.name, "shared/w");
  EXPECT_EQ(info.spec.nbytes, bytes.size());
  EXPECT_EQ(info.spec.shape, std::vector<int64_t>{static_cast<int64_t>(bytes.size())});
  EXPECT_EQ(info.readers.Entries(), (std::vector<std::string>{"uid:1000", "peer:broker-b"}));
  EXPECT_EQ(info.owner_uid, stat.owner_uid);
}

TEST_F(PeerFetchTest, WhatThePeerMayNotHaveIsNotFoundOrRefused) {
  Publish("private/x", {"uid:0"}, 100);
  Publish("mutable/m", {"*"}, 100, 9, /*is_mutable=*/true);
  std::vector<uint8_t> fetched;
  auto hidden = FetchInto(&fetched, Origin(), "private/x");
  EXPECT_EQ(hidden.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(hidden.status().message(),
            absl::StrCat("name 'private/x' is not published at peer 127.0.0.1:", port_));
  auto absent = FetchInto(&fetched, Origin(), "no/such");
  EXPECT_EQ(absent.status().code(), absl::StatusCode::kNotFound);
  auto changing = FetchInto(&fetched, Origin(), "mutable/m");
  EXPECT_EQ(changing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(changing.status().message(),
            absl::StrCat("'mutable/m' is mutable at peer 127.0.0.1:", port_,
                         ": mutable tensors are not replicated"));
  EXPECT_TRUE(fetched.empty());  // no sink was asked for memory
}

TEST_F(PeerFetchTest, ASinkThatRefusesEndsTheFetchWithItsReason) {
  const std::vector<uint8_t> bytes = Publish("shared/w", {"*"}, 3 << 20);
  auto refused = transfer_->Fetch(
      Origin(), "shared/w",
      [](const RemoteTensorInfo&) -> absl::StatusOr<absl::Span<uint8_t>> {
        return absl::ResourceExhaustedError("no room for the replica");
      },
      absl::Seconds(60));
  EXPECT_EQ(refused.status(), absl::ResourceExhaustedError("no room for the replica"));
  std::vector<uint8_t> fetched;  // the origin serves on
  ASSERT_OK(FetchInto(&fetched, Origin(), "shared/w"));
  EXPECT_TRUE(fetched == bytes);
}

TEST_F(PeerFetchTest, APeerWhoseCertificateLacksTheNameAskedForIsNotTrusted) {
  Publish("shared/w", {"*"}, 100);
  std::vector<uint8_t> fetched;
  auto wrong = FetchInto(&fetched, Origin("broker-z"), "shared/w");
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kUnavailable) << wrong.status();
  EXPECT_EQ(
      wrong.status().message().rfind(
          absl::StrCat("fetching 'shared/w' from peer 127.0.0.1:", port_, ": UNAVAILABLE: "), 0),
      0u)
      << wrong.status();
  EXPECT_TRUE(fetched.empty());
}

TEST_F(PeerFetchTest, AnOriginKilledMidTransferFailsTheFetchCleanly) {
  Publish("big/w", {"*"}, 256 << 20);
  std::vector<uint8_t> fetched;
  const pid_t origin = origin_->pid();
  auto cut = transfer_->Fetch(
      Origin(), "big/w",
      [&](const RemoteTensorInfo& info) -> absl::StatusOr<absl::Span<uint8_t>> {
        ::kill(origin, SIGKILL);  // the bytes are still to come
        fetched.assign(info.spec.nbytes, 0);
        return absl::MakeSpan(fetched);
      },
      absl::Seconds(60));
  EXPECT_EQ(cut.status().code(), absl::StatusCode::kUnavailable) << cut.status();
  EXPECT_EQ(cut.status().message().rfind(
                absl::StrCat("fetching 'big/w' from peer 127.0.0.1:", port_, ": "), 0),
            0u)
      << cut.status();
  auto gone = origin_->Stop(SIGKILL);
  ASSERT_TRUE(gone.ok()) << gone.status();
}

TEST(PeerAddressTest, NamesAndAddressesParseAndResolve) {
  ASSERT_OK_AND_ASSIGN(daemon::PeerAddress by_name,
                       daemon::ParsePeerAddress("localhost:7070", "remote[a/]"));
  EXPECT_FALSE(by_name.numeric);
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> targets, daemon::ResolvePeerTargets(by_name));
  EXPECT_NE(std::find(targets.begin(), targets.end(), "ipv4:127.0.0.1:7070"), targets.end());
  ASSERT_OK_AND_ASSIGN(daemon::PeerAddress v6, daemon::ParsePeerAddress("[::1]:1", "f"));
  EXPECT_TRUE(v6.numeric);
  EXPECT_EQ(v6.ToString(), "[::1]:1");
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> v6_targets, daemon::ResolvePeerTargets(v6));
  EXPECT_EQ(v6_targets, std::vector<std::string>{"ipv6:[::1]:1"});
  const std::pair<const char*, const char*> bad[] = {
      {"node-a", "'node-a': needs HOST:PORT, e.g. tensorbroker-peers.tensorbroker.svc:7070"},
      {"node-a:0", "'node-a:0': the port is not a number from 1 to 65535"},
      {"node_a:7070",
       "'node_a:7070': the host is neither a DNS name nor an IPv4 address (IPv6 goes in "
       "brackets)"},
      {"::1:7070",
       "'::1:7070': the host is neither a DNS name nor an IPv4 address (IPv6 goes in brackets)"},
      {"[nothere]:1", "'[nothere]:1': the host in brackets is not an IPv6 address"},
  };
  for (const auto& [text, message] : bad) {
    auto parsed = daemon::ParsePeerAddress(text, "remote[a/]");
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_EQ(parsed.status().message(), absl::StrCat("remote[a/] ", message)) << text;
  }
  ASSERT_OK_AND_ASSIGN(daemon::PeerAddress nowhere,
                       daemon::ParsePeerAddress("no-such-host.invalid:7070", "f"));
  auto unresolved = daemon::ResolvePeerTargets(nowhere);
  EXPECT_EQ(unresolved.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace tensorbroker::testing
