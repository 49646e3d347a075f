// OffsetAllocator: alignment, first fit, coalescing, exhaustion and bad frees.
#include "daemon/memory/offset_allocator.h"

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

TEST(OffsetAllocator, AllocateAtTakesExactlyAFreeAlignedRange) {
  OffsetAllocator allocator(4096, 256);
  EXPECT_TRUE(allocator.AllocateAt(1024, 300));  // [1024, 1536)
  EXPECT_EQ(allocator.SizeAt(1024), 512u);
  EXPECT_FALSE(allocator.AllocateAt(1280, 1)) << "inside a taken range";
  EXPECT_FALSE(allocator.AllocateAt(768, 512)) << "overlaps the taken range";
  EXPECT_FALSE(allocator.AllocateAt(100, 1)) << "not aligned";
  EXPECT_FALSE(allocator.AllocateAt(3840, 512)) << "past the end";
  EXPECT_TRUE(allocator.AllocateAt(0, 1024));
  EXPECT_TRUE(allocator.AllocateAt(3840, 256));
  EXPECT_EQ(allocator.used(), 1024u + 512u + 256u);
  // What is left is still found by Allocate, and frees coalesce as usual.
  EXPECT_EQ(allocator.Allocate(2304), std::optional<uint64_t>(1536));
  EXPECT_FALSE(allocator.Allocate(1).has_value());
  EXPECT_TRUE(allocator.Free(1024));
  EXPECT_TRUE(allocator.Free(0));
  EXPECT_EQ(allocator.Allocate(1536), std::optional<uint64_t>(0));
}

}  // namespace
}  // namespace tensorbroker::daemon
