// Replicas kept fresh (remote prefixes): broker B holds one Watch on the origin for the replicas
// it holds. A replace there is fetched here at once, so a follower with after_version sees every
// version in order; a delete there unpublishes the replica here while holders keep their bytes;
// an origin that goes away leaves the replicas serving, and once it is back the watch re-checks
// them (gone there: dropped; newer there: fetched), the log saying each step. A restart here
// drops the replicas (they are never journaled): the next Get fetches anew.
#include <signal.h>

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tensorbroker/client.h"
#include "tests/integration/remote_fixture.h"
#include "tests/integration/test_util.h"

namespace tensorbroker::testing {
namespace {

using ReplicaFreshnessTest = TwoBrokersTest;

constexpr size_t kBytes = 1 << 20;

// A Get here of `name` newer than `after` (waiting up to 30 s): its bytes and version.
struct Got {
  std::vector<uint8_t> bytes;
  uint64_t version = 0;
};
absl::StatusOr<Got> GetNewer(Client& client, const std::string& name,
                             std::optional<uint64_t> after) {
  GetOptions options;
  options.timeout = std::chrono::seconds(30);
  options.after_version = after;
  auto got = client.Get(name, options);
  if (!got.ok()) return got.status();
  TensorPtr tensor(*got);
  auto info = client.Stat(name);
  if (!info.ok()) return info.status();
  return Got{BytesOf(tensor->dl_tensor), info->version};
}

TEST_F(ReplicaFreshnessTest, AFollowerHereSeesEveryVersionTheOriginPublishesInOrder) {
  std::vector<uint8_t> expected = PublishAtOrigin("shared/v", {"*"}, kBytes, 0);
  ASSERT_OK_AND_ASSIGN(Got first, GetNewer(*at_here_, "shared/v", std::nullopt));
  EXPECT_TRUE(first.bytes == expected);
  uint64_t last = first.version;
  for (uint8_t seed = 1; seed <= 5; ++seed) {
    expected = PutStamped(*at_origin_, "shared/v", {"*"}, kBytes, seed, false, /*replace=*/true);
    ASSERT_OK_AND_ASSIGN(Got next, GetNewer(*at_here_, "shared/v", last));
    EXPECT_TRUE(next.bytes == expected) << "version " << int{seed};
    EXPECT_GT(next.version, last);
    last = next.version;
    ASSERT_OK_AND_ASSIGN(TensorInfo replica, at_here_->Stat("shared/v"));
    ASSERT_OK_AND_ASSIGN(TensorInfo original, at_origin_->Stat("shared/v"));
    ASSERT_TRUE(replica.origin.has_value());
    EXPECT_EQ(replica.origin->version, original.version);
  }
  // One transfer per version, no more.
  EXPECT_EQ(OriginSentToB(), std::make_pair(uint64_t{6}, uint64_t{6 * kBytes}));
}

TEST_F(ReplicaFreshnessTest, ADeleteAtTheOriginUnpublishesTheReplicaAndHoldersKeepTheirBytes) {
  const std::vector<uint8_t> bytes = PublishAtOrigin("shared/d", {"*"}, kBytes, 4);
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw, at_here_->Get("shared/d"));
  TensorPtr held(raw);
  ASSERT_OK_AND_ASSIGN(TensorInfo original, at_origin_->Stat("shared/d"));
  EXPECT_OK(at_origin_->Delete("shared/d"));
  ASSERT_TRUE(PollUntil(
      [&] { return at_here_->Stat("shared/d").status().code() == absl::StatusCode::kNotFound; },
      std::chrono::seconds(30)));
  EXPECT_OK(here_->WaitForLogLine(absl::StrCat(
      "(a replica of peer ", peer_, "'s: deleted there at its version ", original.version, ")")));
  EXPECT_TRUE(BytesOf(held->dl_tensor) == bytes);
}

TEST_F(ReplicaFreshnessTest, WhileTheOriginIsAwayReplicasServeAndItsReturnIsCaughtUp) {
  const std::vector<uint8_t> kept = PublishAtOrigin("shared/kept", {"*"}, kBytes, 1);
  const std::vector<uint8_t> gone = PublishAtOrigin("shared/gone", {"*"}, kBytes, 2);
  ASSERT_OK_AND_ASSIGN(Got kept_here, GetNewer(*at_here_, "shared/kept", std::nullopt));
  ASSERT_OK_AND_ASSIGN(Got gone_here, GetNewer(*at_here_, "shared/gone", std::nullopt));
  ASSERT_OK(here_->WaitForLogLine("remote: the watch of 'shared/' at peer " + peer_ +
                                  " follows its replicas here"));
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(peer_.substr(peer_.rfind(':') + 1), &port));
  ASSERT_TRUE(origin_->Stop(SIGKILL).ok());
  ASSERT_OK(here_->WaitForLogLine("remote: the watch of 'shared/' at peer " + peer_ + " ended: "));
  // Away: what is here still serves.
  ASSERT_OK_AND_ASSIGN(Got served, GetNewer(*at_here_, "shared/kept", std::nullopt));
  EXPECT_TRUE(served.bytes == kept);
  EXPECT_EQ(served.version, kept_here.version);
  // Back on the same port, with a new version of one name and without the other.
  ASSERT_NO_FATAL_FAILURE(StartOrigin(port));
  const std::vector<uint8_t> kept_anew = PublishAtOrigin("shared/kept", {"*"}, kBytes, 7);
  ASSERT_OK(here_->WaitForLogLine(
      absl::StrCat("remote: the watch of 'shared/' at peer ", peer_,
                   " is back; re-checked 2 replica(s): 1 newer there (fetched), 1 gone there "
                   "(dropped)"),
      absl::Seconds(90)));
  EXPECT_CODE(at_here_->Stat("shared/gone"), absl::StatusCode::kNotFound);
  ASSERT_OK_AND_ASSIGN(Got caught_up, GetNewer(*at_here_, "shared/kept", kept_here.version));
  EXPECT_TRUE(caught_up.bytes == kept_anew);
}

TEST_F(ReplicaFreshnessTest, ARestartHereDropsTheReplicasAndTheNextGetFetchesAnew) {
  const std::vector<uint8_t> bytes = PublishAtOrigin("shared/r", {"*"}, kBytes, 3);
  ASSERT_OK_AND_ASSIGN(Got before, GetNewer(*at_here_, "shared/r", std::nullopt));
  EXPECT_TRUE(before.bytes == bytes);
  ASSERT_TRUE(here_->Stop().ok());
  ASSERT_NO_FATAL_FAILURE(StartHere());
  // Never journaled: a Stat finds nothing; a Get fetches the origin's current version again.
  EXPECT_CODE(at_here_->Stat("shared/r"), absl::StatusCode::kNotFound);
  ASSERT_OK_AND_ASSIGN(Got after, GetNewer(*at_here_, "shared/r", std::nullopt));
  EXPECT_TRUE(after.bytes == bytes);
  EXPECT_EQ(OriginSentToB(), std::make_pair(uint64_t{2}, uint64_t{2 * kBytes}));
}

}  // namespace
}  // namespace tensorbroker::testing
