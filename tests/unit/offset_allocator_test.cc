// OffsetAllocator: alignment, first fit, coalescing, exhaustion and bad frees.
#include "daemon/offset_allocator.h"

#include <gtest/gtest.h>

namespace tensorbroker::daemon {
namespace {

TEST(OffsetAllocator, AlignsEveryOffsetAndRoundsSizes) {
  OffsetAllocator a(4096, 256);
  auto x = a.Allocate(1);
  auto y = a.Allocate(300);
  auto z = a.Allocate(0);
  ASSERT_TRUE(x && y && z);
  EXPECT_EQ(*x, 0u);
  EXPECT_EQ(*y, 256u);
  EXPECT_EQ(*z, 768u);
  EXPECT_EQ(a.SizeAt(*y), 512u);
  EXPECT_EQ(a.used(), 1024u);
  EXPECT_EQ(a.allocations(), 3u);
}

TEST(OffsetAllocator, ExhaustsThenReusesFreedSpace) {
  OffsetAllocator a(1024, 256);
  EXPECT_EQ(a.Allocate(1024), 0u);
  EXPECT_FALSE(a.Allocate(1).has_value());
  EXPECT_TRUE(a.Free(0));
  EXPECT_EQ(a.Allocate(512), 0u);
  EXPECT_FALSE(a.Allocate(2048).has_value());
}

TEST(OffsetAllocator, CoalescesNeighboursOnFree) {
  OffsetAllocator a(1024, 256);
  auto p0 = a.Allocate(256), p1 = a.Allocate(256), p2 = a.Allocate(256), p3 = a.Allocate(256);
  ASSERT_TRUE(p0 && p1 && p2 && p3);
  EXPECT_TRUE(a.Free(*p1));
  EXPECT_TRUE(a.Free(*p2));
  EXPECT_EQ(a.Allocate(512), 256u);  // p1 and p2 merged
  EXPECT_TRUE(a.Free(256));
  EXPECT_TRUE(a.Free(*p0));
  EXPECT_TRUE(a.Free(*p3));
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(a.Allocate(1024), 0u);  // all four merged back
}

TEST(OffsetAllocator, RejectsUnknownAndDoubleFrees) {
  OffsetAllocator a(1024, 256);
  auto p = a.Allocate(10);
  ASSERT_TRUE(p);
  EXPECT_FALSE(a.Free(512));
  EXPECT_TRUE(a.Free(*p));
  EXPECT_FALSE(a.Free(*p));
  EXPECT_EQ(a.used(), 0u);
}

}  // namespace
}  // namespace tensorbroker::daemon
