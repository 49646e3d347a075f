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

TEST_F(CpuSegmentPoolTest, LargeBlocksGetTheirOwnSegmentRemovedOnFree) {
  CpuSegmentPool pool(Options(8 << 20));
  std::vector<std::string> removed;
  auto big = pool.Allocate(300 << 10, BlockKind::kImmutable, &removed);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->offset, 0u);
  EXPECT_EQ(big->segment_size, 300u << 10);
  EXPECT_TRUE(ShmExists(big->segment));
  pool.Free(*big, &removed);
  EXPECT_EQ(removed, std::vector<std::string>{big->segment});
  EXPECT_FALSE(ShmExists(big->segment));
  EXPECT_EQ(pool.Stats().reserved_bytes, 0u);
}

TEST_F(CpuSegmentPoolTest, CapacityIsEnforcedAndIdleSegmentsMakeRoom) {
  CpuSegmentPool pool(Options(2 << 20));
  std::vector<std::string> removed;
  auto small = pool.Allocate(10, BlockKind::kImmutable, &removed);  // reserves a 1 MiB segment
  ASSERT_TRUE(small.ok());
  auto too_big = pool.Allocate(1536 << 10, BlockKind::kImmutable, &removed);
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(too_big.status().message().find("capacity"), std::string::npos);
  pool.Free(*small, &removed);  // idle now, kept...
  auto fits = pool.Allocate(1536 << 10, BlockKind::kImmutable, &removed);  // ...until needed
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_EQ(removed.size(), 1u);
  pool.Free(*fits, &removed);
}

}  // namespace
}  // namespace tensorbroker::daemon
