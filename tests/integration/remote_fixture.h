// Two brokers on this machine for the tests of remote prefixes: the origin (broker-a, serving
// peers on 127.0.0.1, its user an administrator) and broker B ("here"), whose names under
// shared/ are the origin's (remote[shared/]), each with a client. Real daemons, real mutual TLS
// with certificates made by the test.
#ifndef TENSORBROKER_TESTS_INTEGRATION_REMOTE_FIXTURE_H_
#define TENSORBROKER_TESTS_INTEGRATION_REMOTE_FIXTURE_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tensorbroker/client.h"
#include "tests/integration/peer_fixture.h"
#include "tests/support/daemon_process.h"

namespace tensorbroker::testing {

class TwoBrokersTest : public ::testing::Test {
 protected:
  void SetUp() override;
  // Starts broker B (again: after Stop) on a fresh socket, names under shared/ the origin's;
  // `extra` flags go to it too.
  void StartHere(const std::vector<std::string>& extra = {});
  // Starts the origin (again: after Stop) as broker-a, on `port` (0: any).
  void StartOrigin(int port = 0);
  // Broker B's own flags, beside its config (a fixture's: e.g. a small --capacity).
  virtual std::vector<std::string> HereFlags() const { return {}; }

  // Publishes `size` stamped bytes at the origin.
  std::vector<uint8_t> PublishAtOrigin(const std::string& name, std::vector<std::string> readers,
                                       size_t size, uint8_t seed = 3) {
    return PutStamped(*at_origin_, name, std::move(readers), size, seed);
  }

  // What the origin served: (Read calls, which broker-b alone makes there; bytes it sent
  // broker-b). B's other calls there (a Ping, the Watch that keeps its replicas fresh) send no
  // tensor bytes.
  std::pair<uint64_t, uint64_t> OriginSentToB();
  // What broker B's Stats say of the origin's address (its remotes row; all zero when none).
  RemoteUsage HereFromOrigin();

  std::unique_ptr<TestPki> pki_;
  std::unique_ptr<DaemonProcess> origin_;
  std::unique_ptr<DaemonProcess> here_;
  std::string peer_;
  std::unique_ptr<Client> at_origin_;
  std::unique_ptr<Client> at_here_;
};

}  // namespace tensorbroker::testing

#endif  // TENSORBROKER_TESTS_INTEGRATION_REMOTE_FIXTURE_H_
