// A replica keeps the origin's readers for this broker's local users: a local user the origin's
// readers do not admit gets NOT_FOUND for it (before it is fetched, and after), exactly as for
// a local tensor; one they admit reads it. The other user is a real process of uid 65534
// (tensorbroker_tenancy_peer) on broker B's socket.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tensorbroker/client.h"
#include "tests/integration/peer_process.h"
#include "tests/integration/remote_fixture.h"
#include "tests/integration/test_util.h"

namespace tensorbroker::testing {
namespace {

using ReplicaAccessTest = TwoBrokersTest;

constexpr uid_t kNobody = 65534;

// Broker B's socket, reachable by uid 65534 with group 0 (the socket's group).
absl::StatusOr<PeerProcess> StartNobodyHere(const std::string& socket) {
  const std::string dir = socket.substr(0, socket.rfind('/'));
  if (::chmod(dir.c_str(), 0755) != 0) return absl::InternalError("chmod " + dir);
  auto process = PeerProcess::StartProgram(
      TENSORBROKER_TENANCY_PEER_PATH, socket,
      {"--uid", std::to_string(kNobody), "--gid", "0", "--groups", "none"});
  if (!process.ok()) return process.status();
  auto ready = process->ReadLine();
  if (!ready.ok()) return ready.status();
  if (*ready != "ready") return absl::InternalError("the peer said: " + *ready);
  return process;
}

// One command's answer line from the other user.
std::string Ask(PeerProcess& other, const std::string& command) {
  if (absl::Status s = other.WriteLine(command); !s.ok()) return s.ToString();
  auto line = other.ReadLine();
  return line.ok() ? *line : line.status().ToString();
}

TEST_F(ReplicaAccessTest, ALocalUserTheOriginsReadersDoNotAdmitCannotReadTheReplica) {
  // Broker B may fetch both; uid 65534 is a reader of "open" only.
  PublishAtOrigin("shared/private", {"peer:broker-b"}, 4096, 1);
  PublishAtOrigin("shared/open", {"peer:broker-b", "uid:65534"}, 4096, 2);
  ASSERT_OK_AND_ASSIGN(PeerProcess nobody, StartNobodyHere(here_->socket_path()));
  // Not here yet: the Get starts the fetch, and the replica is not this user's to see.
  EXPECT_TRUE(absl::StartsWith(Ask(nobody, "get shared/private 0"),
                               "code=5 msg=name 'shared/private' is not published"));
  // Here now (the owner's uid, root, reads it), and still not this user's.
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw, at_here_->Get("shared/private"));
  TensorPtr held(raw);
  ASSERT_OK_AND_ASSIGN(TensorInfo replica, at_here_->Stat("shared/private"));
  ASSERT_TRUE(replica.origin.has_value());
  EXPECT_EQ(replica.readers, std::vector<std::string>{"peer:broker-b"});
  EXPECT_TRUE(absl::StartsWith(Ask(nobody, "get shared/private 0"),
                               "code=5 msg=name 'shared/private' is not published"));
  EXPECT_TRUE(absl::StartsWith(Ask(nobody, "stat shared/private"),
                               "code=5 msg=name 'shared/private' is not published"));
  EXPECT_TRUE(absl::StartsWith(Ask(nobody, "read shared/private"), "code=5 "));
  // A replica whose readers admit it: read byte for byte (the fill check: mixed bytes).
  const std::string open = Ask(nobody, "get shared/open 0");
  EXPECT_TRUE(absl::StartsWith(open, "code=0 ")) << open;
  const std::string read = Ask(nobody, "read shared/open");
  EXPECT_TRUE(absl::StrContains(read, "bytes=4096")) << read;
}

}  // namespace
}  // namespace tensorbroker::testing
