// CpuSegmentPool on real /dev/shm: pooling, dedicated segments, alignment, capacity, removal.
#include "daemon/cpu_segment_pool.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace tensorbroker::daemon {
namespace {

bool ShmExists(const std::string& name) {
  struct stat st;
  return ::stat(("/dev/shm/" + name).c_str(), &st) == 0;
}

class CpuSegmentPoolTest : public ::testing::Test {
 protected:
  CpuSegmentPoolOptions Options(uint64_t capacity) {
    CpuSegmentPoolOptions options;
    options.capacity_bytes = capacity;
    options.name_prefix = prefix_;
    options.pooled_segment_bytes = 1 << 20;
    options.dedicated_threshold = 256 << 10;
    return options;
  }
  void TearDown() override { EXPECT_EQ(ShmSegment::RemoveAllWithPrefix(prefix_), 0); }
  const std::string prefix_ = absl::StrCat("tb-unittest-", ::getpid(), "-");
};

TEST_F(CpuSegmentPoolTest, SmallBlocksShareAlignedPooledSegment) {
  CpuSegmentPool pool(Options(8 << 20));
  std::vector<std::string> removed;
  auto a = pool.Allocate(10, BlockKind::kImmutable, &removed);
  auto b = pool.Allocate(1000, BlockKind::kImmutable, &removed);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->segment, b->segment);
  EXPECT_EQ(a->segment_size, 1u << 20);
  EXPECT_EQ(a->offset % 256, 0u);
  EXPECT_EQ(b->offset % 256, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data) % 256, 0u);
  EXPECT_TRUE(ShmExists(a->segment));
  // The daemon's mapping is writable and shared.
  b->data[0] = 7;
  EXPECT_EQ(pool.Stats().used_bytes, 256u + 1024u);
  EXPECT_EQ(pool.Stats().segments, 1u);
  pool.Free(*a, &removed);
  pool.Free(*b, &removed);
  EXPECT_TRUE(removed.empty());  // one idle pooled segment is kept for reuse
  EXPECT_EQ(pool.Stats().used_bytes, 0u);
}

TEST_F(CpuSegmentPoolTest, MutableAndImmutableNeverShareASegment) {
  CpuSegmentPool pool(Options(8 << 20));
  std::vector<std::string> removed;
  auto a = pool.Allocate(10, BlockKind::kImmutable, &removed);
  auto b = pool.Allocate(10, BlockKind::kMutable, &removed);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->segment, b->segment);
  pool.Free(*a, &removed);
  pool.Free(*b, &removed);
}

TEST_F(CpuSegmentPoolTest, LargeBlocksGetTheirOwnSegmentKeptIdleForReuse) {
  CpuSegmentPool pool(Options(8 << 20));
  std::vector<std::string> removed;
  auto big = pool.Allocate(600 << 10, BlockKind::kImmutable, &removed);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->offset, 0u);
  EXPECT_EQ(big->segment_size, 600u << 10);
  EXPECT_TRUE(ShmExists(big->segment));
  pool.Free(*big, &removed);
  EXPECT_TRUE(removed.empty());  // idle, kept for the next tensor of about that size
  EXPECT_TRUE(ShmExists(big->segment));
  auto again = pool.Allocate(590 << 10, BlockKind::kImmutable, &removed);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->segment, big->segment);
  pool.Free(*again, &removed);
  // Less than half of it: a fresh segment; the mutable kind never reuses an immutable one.
  auto smaller = pool.Allocate(280 << 10, BlockKind::kImmutable, &removed);
  auto other_kind = pool.Allocate(600 << 10, BlockKind::kMutable, &removed);
  ASSERT_TRUE(smaller.ok() && other_kind.ok());
  EXPECT_NE(smaller->segment, big->segment);
  EXPECT_NE(other_kind->segment, big->segment);
  pool.Free(*smaller, &removed);  // replaces the older idle dedicated segment
  EXPECT_EQ(removed, std::vector<std::string>{big->segment});
  EXPECT_FALSE(ShmExists(big->segment));
  pool.Free(*other_kind, &removed);
}

TEST_F(CpuSegmentPoolTest, PooledSegmentsNeverTakeMoreThanAnEighthOfCapacity) {
  CpuSegmentPool pool(Options(4 << 20));  // pooled segments would be 1 MiB; capped at 512 KiB
  std::vector<std::string> removed;
  auto small = pool.Allocate(10, BlockKind::kImmutable, &removed);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->segment_size, 512u << 10);
  auto mutable_block = pool.Allocate(10, BlockKind::kMutable, &removed);
  auto large = pool.Allocate(2 << 20, BlockKind::kImmutable, &removed);
  ASSERT_TRUE(mutable_block.ok() && large.ok()) << large.status();
  pool.Free(*small, &removed);
  pool.Free(*mutable_block, &removed);
  pool.Free(*large, &removed);
}

TEST_F(CpuSegmentPoolTest, CapacityIsEnforcedAndIdleSegmentsMakeRoom) {
  CpuSegmentPool pool(Options(2 << 20));
  std::vector<std::string> removed;
  auto small = pool.Allocate(10, BlockKind::kImmutable, &removed);  // reserves 256 KiB
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->segment_size, 256u << 10);
  auto too_big = pool.Allocate(1920 << 10, BlockKind::kImmutable, &removed);
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(too_big.status().message().find("capacity"), std::string::npos);
  pool.Free(*small, &removed);  // idle now, kept...
  auto fits = pool.Allocate(1920 << 10, BlockKind::kImmutable, &removed);  // ...until needed
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_EQ(removed.size(), 1u);
  pool.Free(*fits, &removed);
}

}  // namespace
}  // namespace tensorbroker::daemon
