// Replicas are a cache (remote prefixes): broker B, with room for 64 MiB, makes room for its own
// tensors by evicting the replicas no one leases, least recently leased first; a replica a
// client holds stays, its bytes intact, and a tensor that finds no more room fails for capacity.
// An evicted name is fetched again when asked for, and B's stats count the evictions per origin
// address. Two real daemons, real mutual TLS.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tensorbroker/client.h"
#include "tests/integration/remote_fixture.h"
#include "tests/integration/test_util.h"
#include "tests/support/host_tensor.h"

namespace tensorbroker::testing {
namespace {

constexpr size_t kReplicaBytes = size_t{20} << 20;  // dedicated segments, 3 fit in 64 MiB

class ReplicaCacheTest : public TwoBrokersTest {
 protected:
  std::vector<std::string> HereFlags() const override { return {"--capacity", "64M"}; }

  // A Get here of `name` (fetched when not held), its bytes checked, the lease released.
  void GetAndRelease(const std::string& name, const std::vector<uint8_t>& expected) {
    ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw, at_here_->Get(name));
    TensorPtr tensor(raw);
    EXPECT_TRUE(BytesOf(tensor->dl_tensor) == expected) << name;
  }

  absl::StatusCode HereHas(const std::string& name) { return at_here_->Stat(name).status().code(); }

  // A tensor of B's own, `kReplicaBytes` under `name`.
  absl::Status PutHere(const std::string& name) {
    std::vector<uint8_t> bytes(kReplicaBytes, 7);
    std::vector<int64_t> shape = {static_cast<int64_t>(bytes.size())};
    return at_here_->Put(name, HostTensor(bytes.data(), shape, dtypes::kUInt8)).status();
  }
};

TEST_F(ReplicaCacheTest, UnleasedReplicasGiveWayLeastRecentlyLeasedFirstAndLeasedOnesStay) {
  const std::vector<uint8_t> old_bytes = PublishAtOrigin("shared/old", {"*"}, kReplicaBytes, 1);
  const std::vector<uint8_t> held_bytes = PublishAtOrigin("shared/held", {"*"}, kReplicaBytes, 2);
  const std::vector<uint8_t> recent_bytes =
      PublishAtOrigin("shared/recent", {"*"}, kReplicaBytes, 3);
  ASSERT_NO_FATAL_FAILURE(GetAndRelease("shared/old", old_bytes));
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * held_raw, at_here_->Get("shared/held"));
  TensorPtr held(held_raw);
  ASSERT_NO_FATAL_FAILURE(GetAndRelease("shared/recent", recent_bytes));
  EXPECT_EQ(OriginSentToB(), std::make_pair(uint64_t{3}, uint64_t{3 * kReplicaBytes}));

  // 60 MiB of replicas in B's 64 MiB: its own 20 MiB tensor takes shared/old's room.
  EXPECT_OK(PutHere("local/one"));
  EXPECT_EQ(HereHas("shared/old"), absl::StatusCode::kNotFound);
  EXPECT_EQ(HereHas("shared/held"), absl::StatusCode::kOk);
  EXPECT_EQ(HereHas("shared/recent"), absl::StatusCode::kOk);
  EXPECT_OK(here_->WaitForLogLine("(a replica of peer " + peer_ +
                                  "'s, evicted for room; fetched again when asked for)"));
  // The next takes shared/recent's; shared/held stays while a client holds it.
  EXPECT_OK(PutHere("local/two"));
  EXPECT_EQ(HereHas("shared/recent"), absl::StatusCode::kNotFound);
  EXPECT_EQ(HereHas("shared/held"), absl::StatusCode::kOk);
  // No replica left to give way: B's own tensor fails for capacity, the held one untouched.
  EXPECT_EQ(PutHere("local/three").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(BytesOf(held->dl_tensor) == held_bytes);

  RemoteUsage counted = HereFromOrigin();
  EXPECT_EQ(counted.replicas, 1u);
  EXPECT_EQ(counted.replica_bytes, kReplicaBytes);
  EXPECT_EQ(counted.fetches, 3u);
  EXPECT_EQ(counted.evictions, 2u);

  // An evicted name is fetched again when asked for, once there is room for it.
  EXPECT_OK(at_here_->Delete("local/one"));
  ASSERT_NO_FATAL_FAILURE(GetAndRelease("shared/old", old_bytes));
  EXPECT_EQ(OriginSentToB(), std::make_pair(uint64_t{4}, uint64_t{4 * kReplicaBytes}));
  EXPECT_EQ(HereFromOrigin().fetches, 4u);
}

// Issue 44: a tensor that evicting every replica could not make room for fails at once, and
// evicts nothing (before, it emptied the cache first and failed all the same); one that
// eviction can help still evicts, only as much as it needs.
TEST_F(ReplicaCacheTest, AnAllocationEvictionCannotHelpEvictsNothing) {
  const std::vector<uint8_t> one = PublishAtOrigin("shared/one", {"*"}, kReplicaBytes, 1);
  const std::vector<uint8_t> two = PublishAtOrigin("shared/two", {"*"}, kReplicaBytes, 2);
  ASSERT_NO_FATAL_FAILURE(GetAndRelease("shared/one", one));
  ASSERT_NO_FATAL_FAILURE(GetAndRelease("shared/two", two));

  // 128 GiB on a 64 MiB broker, and 64 MiB + 1 byte: more than all of B even with no replica.
  for (const int64_t bytes : {int64_t{128} << 30, (int64_t{64} << 20) + 1}) {
    auto created = at_here_->Create("local/huge", {bytes}, dtypes::kUInt8);
    EXPECT_EQ(created.status().code(), absl::StatusCode::kResourceExhausted) << bytes;
  }
  EXPECT_EQ(HereHas("shared/one"), absl::StatusCode::kOk);
  EXPECT_EQ(HereHas("shared/two"), absl::StatusCode::kOk);
  EXPECT_EQ(HereFromOrigin().evictions, 0u);
  EXPECT_EQ(HereFromOrigin().replicas, 2u);

  // 30 MiB: 24 MiB are free, so one replica (the least recently leased) makes room.
  std::vector<uint8_t> bytes(size_t{30} << 20, 5);
  std::vector<int64_t> shape = {static_cast<int64_t>(bytes.size())};
  EXPECT_OK(at_here_->Put("local/fits", HostTensor(bytes.data(), shape, dtypes::kUInt8)).status());
  EXPECT_EQ(HereHas("shared/one"), absl::StatusCode::kNotFound);
  EXPECT_EQ(HereHas("shared/two"), absl::StatusCode::kOk);
  EXPECT_EQ(HereFromOrigin().evictions, 1u);
  ASSERT_NO_FATAL_FAILURE(GetAndRelease("shared/two", two));
}

}  // namespace
}  // namespace tensorbroker::testing
