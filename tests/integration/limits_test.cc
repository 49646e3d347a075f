// Capacity: a daemon started with --capacity 8M refuses a tensor larger than that with
// RESOURCE_EXHAUSTED (Create and Put), refuses one that no longer fits beside what is stored,
// keeps memory a lease still holds after Delete, and reuses the space once it is freed.
#include <string>
#include <vector>

#include "tests/integration/test_util.h"

namespace tensorbroker::testing {
namespace {

constexpr int64_t kMiB = 1 << 20;

class CapacityTest : public BrokerTest {
 protected:
  std::vector<std::string> ExtraArgs() const override {
    return {"--capacity", "8M", "--log-level", "warning"};
  }

  // Creates uint8 [n] filled with `fill` and seals it, releasing the Create lease.
  absl::Status CreateFilled(const std::string& name, int64_t n, uint8_t fill) {
    auto t = client().Create(name, {n}, dtypes::kUInt8);
    if (!t.ok()) return t.status();
    TensorPtr held(*t);
    std::memset(MutableDataOf(held->dl_tensor), fill, static_cast<size_t>(n));
    return client().Seal(name).status();
  }
};

TEST_F(CapacityTest, ReportsTheConfiguredCapacity) {
  ASSERT_OK_AND_ASSIGN(BrokerStats stats, client().Stats());
  EXPECT_EQ(stats.capacity_bytes, static_cast<uint64_t>(8 * kMiB));
  EXPECT_EQ(stats.used_bytes, 0u);
  EXPECT_LE(stats.reserved_bytes, stats.capacity_bytes);
}

TEST_F(CapacityTest, TensorLargerThanCapacityIsResourceExhausted) {
  EXPECT_CODE(client().Create("cap/huge", {9 * kMiB}, dtypes::kUInt8),
              absl::StatusCode::kResourceExhausted);
  ASSERT_OK(client().Ping());
  std::vector<uint8_t> big(static_cast<size_t>(9 * kMiB), 1);
  std::vector<int64_t> shape = {9 * kMiB};
  EXPECT_CODE(client().Put("cap/huge", HostTensor(big.data(), shape, dtypes::kUInt8)),
              absl::StatusCode::kResourceExhausted);
  ASSERT_OK(client().Ping());
  CreateOptions mutable_options;
  mutable_options.is_mutable = true;
  EXPECT_CODE(client().Create("cap/huge", {9 * kMiB}, dtypes::kUInt8, mutable_options),
              absl::StatusCode::kResourceExhausted);
  // Nothing half-made is left behind.
  ASSERT_OK_AND_ASSIGN(BrokerStats stats, client().Stats());
  EXPECT_EQ(stats.pending, 0u);
  EXPECT_EQ(stats.tensors, 0u);
  EXPECT_EQ(stats.used_bytes, 0u);
  EXPECT_LE(stats.reserved_bytes, stats.capacity_bytes);
  EXPECT_CODE(client().Stat("cap/huge"), absl::StatusCode::kNotFound);
}

TEST_F(CapacityTest, SpaceIsReusableAfterDeleteAndOnlyAfterTheLastLease) {
  ASSERT_OK(CreateFilled("cap/a", 6 * kMiB, 0xa1));
  // 6 MiB more does not fit beside it, by Create or Put.
  EXPECT_CODE(client().Create("cap/b", {6 * kMiB}, dtypes::kUInt8),
              absl::StatusCode::kResourceExhausted);
  std::vector<uint8_t> six(static_cast<size_t>(6 * kMiB), 0xb2);
  std::vector<int64_t> shape = {6 * kMiB};
  EXPECT_CODE(client().Put("cap/b", HostTensor(six.data(), shape, dtypes::kUInt8)),
              absl::StatusCode::kResourceExhausted);
  ASSERT_OK(client().Ping());

  // Deleted but still leased: the memory is still in use.
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw, client().Get("cap/a"));
  TensorPtr held(raw);
  ASSERT_OK(client().Delete("cap/a"));
  EXPECT_CODE(client().Create("cap/b", {6 * kMiB}, dtypes::kUInt8),
              absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(BytesOf(held->dl_tensor), std::vector<uint8_t>(static_cast<size_t>(6 * kMiB), 0xa1));
  held.reset();

  // Freed: the same space serves a new tensor, by Put and then (after Delete) by Create.
  ASSERT_OK(client().Put("cap/b", HostTensor(six.data(), shape, dtypes::kUInt8)));
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw_b, client().Get("cap/b"));
  TensorPtr b(raw_b);
  EXPECT_EQ(BytesOf(b->dl_tensor), six);
  b.reset();
  ASSERT_OK(client().Delete("cap/b"));
  ASSERT_OK(CreateFilled("cap/c", 6 * kMiB, 0xc3));
  ASSERT_OK_AND_ASSIGN(BrokerStats stats, client().Stats());
  EXPECT_EQ(stats.tensors, 1u);
  EXPECT_GE(stats.used_bytes, static_cast<uint64_t>(6 * kMiB));
  EXPECT_LE(stats.used_bytes, stats.capacity_bytes);
  EXPECT_LE(stats.reserved_bytes, stats.capacity_bytes);
}

TEST_F(CapacityTest, ManySmallTensorsUntilFullThenAllReusable) {
  // Fill with 1 MiB tensors until refused; at most 8 fit, and the refusal is RESOURCE_EXHAUSTED.
  int stored = 0;
  absl::Status last;
  for (int i = 0; i < 16; ++i) {
    last = CreateFilled("cap/s" + std::to_string(i), kMiB, static_cast<uint8_t>(i));
    if (!last.ok()) break;
    ++stored;
  }
  EXPECT_EQ(last.code(), absl::StatusCode::kResourceExhausted) << last;
  EXPECT_GE(stored, 1);
  EXPECT_LE(stored, 8);
  for (int i = 0; i < stored; ++i) {
    ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw, client().Get("cap/s" + std::to_string(i)));
    TensorPtr t(raw);
    EXPECT_EQ(BytesOf(t->dl_tensor), std::vector<uint8_t>(kMiB, static_cast<uint8_t>(i)));
  }
  for (int i = 0; i < stored; ++i) ASSERT_OK(client().Delete("cap/s" + std::to_string(i)));
  ASSERT_OK_AND_ASSIGN(BrokerStats empty, client().Stats());
  EXPECT_EQ(empty.used_bytes, 0u);
  // All of it is usable again: 6 MiB in one piece.
  ASSERT_OK(CreateFilled("cap/big", 6 * kMiB, 0x7f));
}

}  // namespace
}  // namespace tensorbroker::testing
