// The peer listener (--peer-listen): other brokers reach the API over TCP with mutual TLS only,
// are known by their certificate's names (peer:NAME), may read what the readers admit and
// nothing else. Real daemon, real TLS with certificates made by the test, real gRPC.
#include <grp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tensorbroker/client.h"
#include "tests/integration/peer_fixture.h"
#include "tests/integration/test_util.h"
#include "tests/support/host_tensor.h"
#include "tests/support/subprocess.h"

namespace tensorbroker::testing {
namespace {

// tensorbrokerd on `socket` with `flags`, run to its exit (a start that must fail): its output.
absl::StatusOr<ProcessOutput> RunDaemonToExit(const std::string& socket,
                                              const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {DaemonBinaryPath(), "--socket", socket};
  argv.insert(argv.end(), flags.begin(), flags.end());
  SubprocessOptions options;
  options.capture_stderr = true;
  options.capture_stdout = true;
  auto daemon = Subprocess::Spawn(argv, options);
  if (!daemon.ok()) return daemon.status();
  return daemon->Finish(absl::Seconds(30));
}

class PeerListenerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pki = TestPki::Make();
    ASSERT_TRUE(pki.ok()) << pki.status();
    pki_ = *std::move(pki);
    auto serving = StartServingPeers(*pki_, "broker-a");
    ASSERT_TRUE(serving.ok()) << serving.status();
    daemon_ = std::move(serving->daemon);
    port_ = serving->port;
    auto client = Client::Connect(daemon_->socket_path());
    ASSERT_TRUE(client.ok()) << client.status();
    local_ = *std::move(client);
  }

  // Publishes `size` bytes counting from `seed` under `name` for `readers`; returns the bytes.
  std::string Publish(const std::string& name, std::vector<std::string> readers, size_t size = 3000,
                      uint8_t seed = 7) {
    const std::vector<uint8_t> bytes = PutStamped(*local_, name, std::move(readers), size, seed);
    return std::string(bytes.begin(), bytes.end());
  }

  // What a local client reads of `name` now.
  std::string LocalBytes(const std::string& name) {
    auto got = local_->Get(name);
    EXPECT_TRUE(got.ok()) << name << ": " << got.status();
    if (!got.ok()) return "";
    TensorPtr tensor(*got);
    std::vector<uint8_t> bytes = BytesOf(tensor->dl_tensor);
    return std::string(bytes.begin(), bytes.end());
  }

  std::unique_ptr<v1::Broker::Stub> Peer(const std::string& identity = "broker-b") {
    return PeerStub(*pki_, port_, PeerIdentity{identity, "ca.crt"});
  }

  // Calls made to the daemon so far, all methods but Stats (which this asks with).
  uint64_t CallsButStats() {
    auto stats = local_->Stats();
    EXPECT_TRUE(stats.ok()) << stats.status();
    uint64_t calls = 0;
    if (!stats.ok()) return 0;
    for (const MethodStats& method : stats->methods) {
      if (method.method == "Stats") continue;
      for (const auto& [code, count] : method.calls) calls += count;
    }
    return calls;
  }

  std::unique_ptr<TestPki> pki_;
  std::unique_ptr<DaemonProcess> daemon_;
  int port_ = 0;
  std::unique_ptr<Client> local_;
};

TEST_F(PeerListenerTest, APeerReadsWhatTheReadersAdmitItTo) {
  const std::string shared = Publish("shared/w", {"peer:broker-b"}, 3 << 20, 1);
  const std::string open = Publish("open/y", {"*"}, 100, 2);
  Publish("private/x", {"uid:0"}, 100, 3);
  auto peer = Peer("broker-b");

  v1::StatRequest stat;
  stat.set_name("shared/w");
  v1::TensorInfo info;
  grpc::Status status = peer->Stat(ContextWithin().get(), stat, &info);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(info.name(), "shared/w");
  ASSERT_EQ(info.readers_size(), 1);
  EXPECT_EQ(info.readers(0), "peer:broker-b");
  ASSERT_OK_AND_ASSIGN(std::string read, ReadAll(*peer, "shared/w"));
  EXPECT_TRUE(read == shared) << "the peer read " << read.size() << " bytes, not the 3 MiB put";
  ASSERT_OK_AND_ASSIGN(std::string read_open, ReadAll(*peer, "open/y"));
  EXPECT_EQ(read_open, open);

  // A tensor its readers do not admit the peer to is not there, as for a local non-reader.
  stat.set_name("private/x");
  status = peer->Stat(ContextWithin().get(), stat, &info);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(status.error_message(), "name 'private/x' is not published");
  grpc::Status read_status;
  EXPECT_FALSE(ReadAll(*peer, "private/x", &read_status).ok());
  EXPECT_EQ(read_status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(read_status.error_message(), "name 'private/x' is not published");

  v1::ListRequest list;
  v1::ListResponse names;
  status = peer->List(ContextWithin().get(), list, &names);
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<std::string> listed;
  for (const v1::TensorInfo& entry : names.tensors()) listed.push_back(entry.name());
  EXPECT_EQ(listed, (std::vector<std::string>{"open/y", "shared/w"}));

  // Another broker of the same CA, with another name: not admitted to shared/w.
  auto other = Peer("broker-a");
  stat.set_name("shared/w");
  status = other->Stat(ContextWithin().get(), stat, &info);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND) << status.error_message();
  // The local owner still reads every byte.
  EXPECT_TRUE(LocalBytes("shared/w") == shared);

  // Stats counts each peer's calls and the bytes sent to it, by the name its certificate gives.
  ASSERT_OK_AND_ASSIGN(BrokerStats stats, local_->Stats());
  ASSERT_EQ(stats.peers.size(), 2u);
  EXPECT_EQ(stats.peers[0].peer, "broker-a");
  EXPECT_EQ(stats.peers[0].calls, 1u);  // its Stat
  EXPECT_EQ(stats.peers[0].sent_bytes, 0u);
  EXPECT_EQ(stats.peers[1].peer, "broker-b");
  EXPECT_EQ(stats.peers[1].calls, 6u);  // Stat, Read, Read, Stat, Read, List
  EXPECT_EQ(stats.peers[1].sent_bytes, shared.size() + open.size());
}

TEST_F(PeerListenerTest, APeerMayOnlyRead) {
  const std::string bytes = Publish("shared/w", {"*"});
  auto peer = Peer("broker-b");
  const std::string tail = "' may only read here (Stat, Read, List, Watch, Stats, Ping); ";

  v1::DeleteRequest del;
  del.set_name("shared/w");
  v1::Empty empty;
  grpc::Status status = peer->Delete(ContextWithin().get(), del, &empty);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(status.error_message(),
            "Delete: peer 'broker-b" + tail + "Delete is for the broker's local clients");

  v1::CreateRequest create;
  create.set_name("shared/w");
  v1::TensorGrant grant;
  status = peer->Create(ContextWithin().get(), create, &grant);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();

  v1::GetRequest get;
  get.set_name("shared/w");
  status = peer->Get(ContextWithin().get(), get, &grant);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(status.error_message(),
            "Get: peer 'broker-b" + tail + "Get is for the broker's local clients");

  {
    auto context = ContextWithin();
    v1::TensorInfo info;
    auto writer = peer->Put(context.get(), &info);
    v1::PutRequest chunk;
    chunk.mutable_header()->set_name("shared/w");
    writer->Write(chunk);
    writer->WritesDone();
    status = writer->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
  }
  {
    auto context = ContextWithin();
    auto session = peer->Session(context.get());
    v1::SessionEvent event;
    EXPECT_FALSE(session->Read(&event));
    status = session->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
  }
  // Nothing changed, and the daemon serves on.
  EXPECT_TRUE(LocalBytes("shared/w") == bytes);
  ASSERT_OK_AND_ASSIGN(std::string read, ReadAll(*peer, "shared/w"));
  EXPECT_TRUE(read == bytes);
}

TEST_F(PeerListenerTest, ConnectionsWithoutAValidCertificateMakeNoCall) {
  const std::string bytes = Publish("shared/w", {"*"});
  const uint64_t calls_before = CallsButStats();
  struct Attempt {
    const char* what;
    std::unique_ptr<v1::Broker::Stub> stub;
  };
  std::vector<Attempt> attempts;
  attempts.push_back({"no client certificate", Peer("")});
  attempts.push_back({"a certificate of another CA (named broker-b)", Peer("intruder")});
  attempts.push_back({"an expired certificate (named broker-b)", Peer("expired")});
  attempts.push_back({"plaintext", PlaintextStub(port_)});
  for (Attempt& attempt : attempts) {
    v1::Empty empty;
    grpc::Status ping = attempt.stub->Ping(ContextWithin(5).get(), empty, &empty);
    EXPECT_EQ(ping.error_code(), grpc::StatusCode::UNAVAILABLE)
        << attempt.what << ": " << ping.error_message();
    grpc::Status read;
    EXPECT_FALSE(ReadAll(*attempt.stub, "shared/w", &read).ok()) << attempt.what;
    EXPECT_EQ(read.error_code(), grpc::StatusCode::UNAVAILABLE) << attempt.what;
  }
  // The daemon saw no call from any of them: they were refused in the handshake.
  EXPECT_EQ(CallsButStats(), calls_before);
  // The bytes are intact and a peer with a valid certificate is served.
  EXPECT_TRUE(LocalBytes("shared/w") == bytes);
  ASSERT_OK_AND_ASSIGN(std::string read, ReadAll(*Peer("broker-b"), "shared/w"));
  EXPECT_TRUE(read == bytes);
}

// The peer port is one daemon's: a second daemon (same user, another socket) cannot bind it
// too, and stops at start naming it.
TEST_F(PeerListenerTest, ASecondDaemonCannotShareThePeerPort) {
  const std::string bytes = Publish("shared/w", {"*"});
  TempDir dir("tbpeerport");
  std::vector<std::string> flags = pki_->ListenFlags("broker-a");
  flags[1] = absl::StrCat("127.0.0.1:", port_);
  ASSERT_OK_AND_ASSIGN(ProcessOutput out, RunDaemonToExit(dir.path() + "/broker.sock", flags));
  EXPECT_TRUE(WIFEXITED(out.status) && WEXITSTATUS(out.status) != 0) << out.err;
  EXPECT_NE(out.err.find(absl::StrCat("--peer-listen: cannot listen on 127.0.0.1:", port_,
                                      ": Address already in use")),
            std::string::npos)
      << out.err;
  // Every peer connection still reaches this daemon.
  for (int i = 0; i < 4; ++i) {
    ASSERT_OK_AND_ASSIGN(std::string read, ReadAll(*Peer("broker-b"), "shared/w"));
    EXPECT_TRUE(read == bytes);
  }
}

// --takeover: the old daemon frees the peer port at the hand-over, the new one binds it and
// serves the adopted tensors to peers.
TEST_F(PeerListenerTest, ATakeoverHandsThePeerPortOn) {
  const std::string bytes = Publish("shared/w", {"peer:broker-b"}, 2 << 20, 4);
  const pid_t old_pid = daemon_->pid();
  local_.reset();
  std::vector<std::string> flags = pki_->ListenFlags("broker-a");
  flags[1] = absl::StrCat("127.0.0.1:", port_);
  flags.insert(flags.begin(), "--takeover");
  ASSERT_OK_AND_ASSIGN(DaemonProcess successor,
                       DaemonProcess::StartOn(daemon_->socket_path(), flags));
  int status = 0;
  ASSERT_EQ(::waitpid(old_pid, &status, 0), old_pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << DescribeWaitStatus(status);
  daemon_->MarkReaped();
  ASSERT_OK_AND_ASSIGN(int port, PeerPortOf(successor));
  EXPECT_EQ(port, port_);
  ASSERT_OK_AND_ASSIGN(std::string read, ReadAll(*Peer("broker-b"), "shared/w"));
  EXPECT_TRUE(read == bytes) << "the peer read " << read.size() << " bytes after the takeover";
  auto stopped = successor.Stop();
  ASSERT_TRUE(stopped.ok()) << stopped.status();
}

// The daemon refuses to start with TLS settings that cannot work, naming the flag and file.
TEST(PeerListenerSettingsTest, BadTlsSettingsStopTheStartNamingTheFlagAndFile) {
  auto pki_or = TestPki::Make();
  ASSERT_TRUE(pki_or.ok()) << pki_or.status();
  const TestPki& pki = **pki_or;
  TempDir dir("tbpeerflags");
  const std::string socket = dir.path() + "/broker.sock";
  struct Case {
    std::vector<std::string> flags;
    std::string error;
  };
  const std::vector<Case> cases = {
      {{"--peer-listen", "127.0.0.1:0", "--tls-cert", pki.File("broker-a.crt")},
       "--peer-listen: needs tls-cert, tls-key and tls-ca (mutual TLS; there is no plaintext "
       "TCP): "
       "tls-key, tls-ca are not set"},
      {{"--peer-listen", "127.0.0.1:0", "--tls-cert", pki.File("broker-a.crt"), "--tls-key",
        pki.File("broker-b.key"), "--tls-ca", pki.File("ca.crt")},
       "--tls-key " + pki.File("broker-b.key") + " is not the key of --tls-cert " +
           pki.File("broker-a.crt")},
      {{"--peer-listen", "127.0.0.1:0", "--tls-cert", pki.File("expired.crt"), "--tls-key",
        pki.File("expired.key"), "--tls-ca", pki.File("ca.crt")},
       "--tls-cert " + pki.File("expired.crt") + " does not verify against --tls-ca " +
           pki.File("ca.crt") + ": certificate has expired"},
      {{"--peer-listen", "127.0.0.1:0", "--tls-cert", pki.File("intruder.crt"), "--tls-key",
        pki.File("intruder.key"), "--tls-ca", pki.File("ca.crt")},
       "--tls-cert " + pki.File("intruder.crt") + " does not verify against --tls-ca " +
           pki.File("ca.crt") + ": unable to get local issuer certificate"},
      {{"--peer-listen", "127.0.0.1:0", "--tls-cert", pki.File("missing.crt"), "--tls-key",
        pki.File("broker-a.key"), "--tls-ca", pki.File("ca.crt")},
       "--tls-cert " + pki.File("missing.crt") + ": cannot read it: No such file or directory"},
      {{"--peer-listen", "localhost:7000"},
       "--peer-listen 'localhost:7000': the host is not an IPv4 address (IPv6 goes in brackets, "
       "e.g. [::1]:9464)"},
  };
  for (const Case& c : cases) {
    ASSERT_OK_AND_ASSIGN(ProcessOutput out, RunDaemonToExit(socket, c.flags));
    EXPECT_TRUE(WIFEXITED(out.status) && WEXITSTATUS(out.status) != 0) << out.err;
    EXPECT_NE(out.err.find(c.error), std::string::npos)
        << "wanted: " << c.error << "\ngot: " << out.err;
  }
}

}  // namespace
}  // namespace tensorbroker::testing
