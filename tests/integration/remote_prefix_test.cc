// Remote prefixes (remote[PREFIX] = ADDRESS): a Get on broker B of a name broker A serves fetches
// it once over mutual TLS into a local replica and serves it zero-copy from then on; publishing
// there is refused naming the peer. Two real daemons on this machine, certificates made by the
// test.
#include <unistd.h>

#include <gtest/gtest.h>

#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tensorbroker/client.h"
#include "tests/integration/remote_fixture.h"
#include "tests/integration/test_util.h"
#include "tests/support/host_tensor.h"

namespace tensorbroker::testing {
namespace {

using RemotePrefixTest = TwoBrokersTest;

TEST_F(RemotePrefixTest, AGetFetchesOnceThenServesTheReplicaLocally) {
  const std::vector<uint8_t> bytes = PublishAtOrigin("shared/w", {"*"}, (3 << 20) + 5);
  {
    ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw, at_here_->Get("shared/w"));
    TensorPtr tensor(raw);
    EXPECT_TRUE(BytesOf(tensor->dl_tensor) == bytes);
  }
  EXPECT_EQ(OriginSentToB(), std::make_pair(uint64_t{1}, uint64_t{bytes.size()}));
  // The replica is this broker's tensor now: a second Get asks nothing of the origin.
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * again_raw, at_here_->Get("shared/w"));
  TensorPtr again(again_raw);
  EXPECT_TRUE(BytesOf(again->dl_tensor) == bytes);
  EXPECT_EQ(OriginSentToB(), std::make_pair(uint64_t{1}, uint64_t{bytes.size()}));
  ASSERT_OK_AND_ASSIGN(TensorInfo replica, at_here_->Stat("shared/w"));
  ASSERT_OK_AND_ASSIGN(TensorInfo original, at_origin_->Stat("shared/w"));
  ASSERT_TRUE(replica.origin.has_value());
  EXPECT_EQ(replica.origin->peer, peer_);
  EXPECT_EQ(replica.origin->version, original.version);
  EXPECT_GE(replica.origin->fetched_unix_ms, original.created_unix_ms);
  EXPECT_FALSE(original.origin.has_value());
  EXPECT_EQ(replica.readers, std::vector<std::string>{"*"});
  EXPECT_TRUE(replica.sealed);
  EXPECT_FALSE(replica.is_mutable);
  // B's Stats count it under the origin's address.
  const RemoteUsage counted = HereFromOrigin();
  EXPECT_EQ(counted.replicas, 1u);
  EXPECT_EQ(counted.replica_bytes, bytes.size());
  EXPECT_EQ(counted.fetches, 1u);
  EXPECT_EQ(counted.fetched_bytes, bytes.size());
  EXPECT_EQ(counted.fetch_failures, 0u);
  EXPECT_EQ(counted.evictions, 0u);
}

// 100 Gets of one name make one transfer: one that starts it, and 99 more that come while its
// replica is on its way here (pending), each waiting for it rather than finding nothing.
TEST_F(RemotePrefixTest, ManyGetsOfOneNameMakeOneTransfer) {
  const std::vector<uint8_t> bytes = PublishAtOrigin("shared/many", {"*"}, 256 << 20, 9);
  std::atomic<int> right{0};
  auto get = [&] {
    auto got = at_here_->Get("shared/many");
    if (!got.ok()) {
      ADD_FAILURE() << got.status();
      return;
    }
    TensorPtr tensor(*got);
    const DLTensor& dl = tensor->dl_tensor;
    const auto* data = static_cast<const uint8_t*>(dl.data) + dl.byte_offset;
    if (std::memcmp(data, bytes.data(), bytes.size()) == 0) ++right;  // in place: 100 readers
  };
  std::vector<std::thread> getters;
  getters.emplace_back(get);
  // The replica is pending here while its bytes come: the other Gets arrive now.
  ASSERT_TRUE(PollUntil(
      [&] {
        auto stats = at_here_->Stats();
        return stats.ok() && stats->pending == 1;
      },
      std::chrono::seconds(30)));
  for (int i = 1; i < 100; ++i) getters.emplace_back(get);
  for (std::thread& getter : getters) getter.join();
  EXPECT_EQ(right.load(), 100);
  EXPECT_EQ(OriginSentToB(), std::make_pair(uint64_t{1}, uint64_t{bytes.size()}));
}

TEST_F(RemotePrefixTest, WhatTheOriginWillNotGiveIsNotFound) {
  PublishAtOrigin("shared/private", {"uid:0"}, 100);  // no peer:broker-b
  EXPECT_CODE(at_here_->Get("shared/private"), absl::StatusCode::kNotFound);
  EXPECT_CODE(at_here_->Get("shared/absent"), absl::StatusCode::kNotFound);
}

TEST_F(RemotePrefixTest, PublishingOrDeletingUnderARemotePrefixIsRefusedNamingThePeer) {
  PublishAtOrigin("shared/w", {"*"}, 100);
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw, at_here_->Get("shared/w"));
  TensorPtr held(raw);
  std::vector<uint8_t> mine(10, 1);
  std::vector<int64_t> shape = {10};
  DLTensor tensor = HostTensor(mine.data(), shape, dtypes::kUInt8);
  auto put = at_here_->Put("shared/x", tensor);
  EXPECT_EQ(put.status(), absl::FailedPreconditionError(absl::StrCat(
                              "name 'shared/x' is served by peer ", peer_,
                              " (remote[...] in this broker's settings): publish it there")));
  EXPECT_EQ(at_here_->Delete("shared/w"),
            absl::FailedPreconditionError(absl::StrCat("name 'shared/w' is a replica of peer ",
                                                       peer_, "'s tensor: delete it there")));
  // Names outside the prefix are this broker's own.
  EXPECT_OK(at_here_->Put("local/x", tensor));
}

// The origin killed while its bytes are on their way: the Get fails UNAVAILABLE naming the peer,
// and nothing is published or held here.
TEST_F(RemotePrefixTest, AnOriginKilledMidTransferLeavesNothingHere) {
  PublishAtOrigin("shared/big", {"*"}, 512 << 20);
  std::optional<absl::Status> outcome;
  std::thread getter([&] { outcome = at_here_->Get("shared/big").status(); });
  // The replica is pending here while its bytes come.
  ASSERT_TRUE(PollUntil(
      [&] {
        auto stats = at_here_->Stats();
        return stats.ok() && stats->pending == 1;
      },
      std::chrono::seconds(30)));
  ASSERT_TRUE(origin_->Stop(SIGKILL).ok());
  getter.join();
  ASSERT_TRUE(outcome.has_value());
  EXPECT_EQ(outcome->code(), absl::StatusCode::kUnavailable) << *outcome;
  EXPECT_EQ(outcome->message().rfind(absl::StrCat("fetching 'shared/big' from peer ", peer_), 0),
            0u)
      << *outcome;
  EXPECT_CODE(at_here_->Stat("shared/big"), absl::StatusCode::kNotFound);
  ASSERT_OK_AND_ASSIGN(BrokerStats stats, at_here_->Stats());
  EXPECT_EQ(stats.pending, 0u);
  EXPECT_EQ(stats.used_bytes, 0u);
  EXPECT_EQ(stats.tensors, 0u);
  const RemoteUsage counted = HereFromOrigin();
  EXPECT_EQ(counted.fetch_failures, 1u);
  EXPECT_EQ(counted.fetches, 0u);
  EXPECT_EQ(counted.replicas, 0u);
}

}  // namespace
}  // namespace tensorbroker::testing
