// What the tests of brokers across nodes share: certificates made for the test
// (tests/support/make_test_pki.sh: a CA, brokers broker-a and broker-b, a certificate of another
// CA and an expired one), a daemon serving peers on 127.0.0.1 with broker-a's certificate, and
// gRPC stubs that connect to it as a peer with any of those certificates.
//
// Threading: one test thread.
#ifndef TENSORBROKER_TESTS_INTEGRATION_PEER_FIXTURE_H_
#define TENSORBROKER_TESTS_INTEGRATION_PEER_FIXTURE_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tensorbroker/client.h"
#include "tensorbroker/v1/broker.grpc.pb.h"
#include "tests/support/daemon_process.h"
#include "tests/support/temp_dir.h"

namespace tensorbroker::testing {

// The certificates of one test, in a temporary directory.
class TestPki {
 public:
  // Runs make_test_pki.sh into a new temporary directory, for `brokers` (empty: broker-a and
  // broker-b).
  static absl::StatusOr<std::unique_ptr<TestPki>> Make(
      const std::vector<std::string>& brokers = {});
  // DIR/NAME, e.g. File("broker-b.crt").
  std::string File(const std::string& name) const { return dir_.path() + "/" + name; }
  // The daemon flags that serve peers on 127.0.0.1 (any port) as `broker`.
  std::vector<std::string> ListenFlags(const std::string& broker = "broker-a") const;
  // The file's text ("" when unreadable).
  std::string Read(const std::string& name) const;

 private:
  TestPki() : dir_("tbpki") {}
  TempDir dir_;
};

// The port the daemon's log says its peer listener took ("peers: serving on HOST:PORT"),
// waiting up to 30 s for the line (a successor of --takeover logs it after the socket answers).
absl::StatusOr<int> PeerPortOf(const DaemonProcess& daemon);

// What a peer connects with: `identity` names the files NAME.crt and NAME.key ("" for none:
// no client certificate); `ca` the CA file the client trusts the server with.
struct PeerIdentity {
  std::string identity = "broker-b";
  std::string ca = "ca.crt";
};
// A stub on 127.0.0.1:port over TLS as `peer`.
std::unique_ptr<v1::Broker::Stub> PeerStub(const TestPki& pki, int port, const PeerIdentity& peer);
// A stub on 127.0.0.1:port without TLS.
std::unique_ptr<v1::Broker::Stub> PlaintextStub(int port);

// A daemon serving peers on 127.0.0.1 as `broker`, its user an administrator (so its Stats show
// every peer), and the port it took.
struct PeerServingDaemon {
  std::unique_ptr<DaemonProcess> daemon;
  int port = 0;
};
// `extra` flags go to the daemon too; `port` 0: any free one; `host` the IPv4 address it
// listens on.
absl::StatusOr<PeerServingDaemon> StartServingPeers(const TestPki& pki,
                                                    const std::string& broker = "broker-a",
                                                    const std::vector<std::string>& extra = {},
                                                    int port = 0,
                                                    const std::string& host = "127.0.0.1");

// `size` stamped uint8 bytes (each from its index and `seed`) put under `name` for `readers`
// through `client`; returns them.
std::vector<uint8_t> PutStamped(Client& client, const std::string& name,
                                std::vector<std::string> readers, size_t size, uint8_t seed,
                                bool is_mutable = false, bool replace = false);

// A client context with a deadline `seconds` away.
std::unique_ptr<grpc::ClientContext> ContextWithin(int seconds = 10);

// Every byte of `name` read over `stub`'s Read stream; the stream's status when it fails.
absl::StatusOr<std::string> ReadAll(v1::Broker::Stub& stub, const std::string& name,
                                    grpc::Status* status_out = nullptr);

}  // namespace tensorbroker::testing

#endif  // TENSORBROKER_TESTS_INTEGRATION_PEER_FIXTURE_H_
