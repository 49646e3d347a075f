// CopyToCompact: transposes, slices, negative strides, byte_offset, 0-d and empty tensors.
#include "common/strided_copy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

namespace tensorbroker {
namespace {

DLTensor View(std::vector<float>& data, std::vector<int64_t>& shape, std::vector<int64_t>* strides,
              uint64_t byte_offset = 0) {
  DLTensor t{};
  t.data = data.data();
  t.device = {kDLCPU, 0};
  t.ndim = static_cast<int32_t>(shape.size());
  t.dtype = {kDLFloat, 32, 1};
  t.shape = shape.data();
  t.strides = strides == nullptr ? nullptr : strides->data();
  t.byte_offset = byte_offset;
  return t;
}

TEST(CopyToCompact, Transpose) {
  std::vector<float> src(12);
  std::iota(src.begin(), src.end(), 0.f);           // 3x4 row-major
  std::vector<int64_t> shape{4, 3}, strides{1, 4};  // its transpose
  std::vector<float> dst(12, -1.f);
  CopyToCompact(View(src, shape, &strides), reinterpret_cast<uint8_t*>(dst.data()));
  EXPECT_EQ(dst, (std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
}

TEST(CopyToCompact, StepSliceWithByteOffset) {
  std::vector<float> src(16);
  std::iota(src.begin(), src.end(), 0.f);           // 4x4
  std::vector<int64_t> shape{2, 2}, strides{8, 2};  // x[::2, ::2] starting at [0, 1]
  std::vector<float> dst(4);
  CopyToCompact(View(src, shape, &strides, sizeof(float)), reinterpret_cast<uint8_t*>(dst.data()));
  EXPECT_EQ(dst, (std::vector<float>{1, 3, 9, 11}));
}

TEST(CopyToCompact, NegativeStrides) {
  std::vector<float> src{0, 1, 2, 3, 4, 5};           // 2x3
  std::vector<int64_t> shape{2, 3}, strides{-3, -1};  // x[::-1, ::-1]
  std::vector<float> dst(6);
  CopyToCompact(View(src, shape, &strides, 5 * sizeof(float)),
                reinterpret_cast<uint8_t*>(dst.data()));
  EXPECT_EQ(dst, (std::vector<float>{5, 4, 3, 2, 1, 0}));
}

TEST(CopyToCompact, ContiguousInnerRowsAndNullStrides) {
  std::vector<float> src(12);
  std::iota(src.begin(), src.end(), 0.f);
  std::vector<int64_t> shape{2, 3}, strides{6, 1};  // every other row of a 4x3... rows 0 and 2
  std::vector<float> dst(6);
  CopyToCompact(View(src, shape, &strides), reinterpret_cast<uint8_t*>(dst.data()));
  EXPECT_EQ(dst, (std::vector<float>{0, 1, 2, 6, 7, 8}));
  std::vector<float> whole(6);
  CopyToCompact(View(src, shape, nullptr), reinterpret_cast<uint8_t*>(whole.data()));
  EXPECT_EQ(whole, (std::vector<float>{0, 1, 2, 3, 4, 5}));
}

TEST(CopyToCompact, ScalarAndEmpty) {
  std::vector<float> src{42};
  std::vector<int64_t> none;
  std::vector<float> dst(1);
  CopyToCompact(View(src, none, &none), reinterpret_cast<uint8_t*>(dst.data()));
  EXPECT_EQ(dst[0], 42.f);
  std::vector<int64_t> empty_shape{0, 3}, empty_strides{3, 1};
  CopyToCompact(View(src, empty_shape, &empty_strides), nullptr);  // copies nothing
}

}  // namespace
}  // namespace tensorbroker

namespace tensorbroker {
namespace {

std::vector<float> Collect(const DLTensor& t, size_t max_chunk, size_t* calls) {
  std::vector<float> out;
  *calls = 0;
  EXPECT_TRUE(StreamCompact(t, max_chunk, [&](const uint8_t* data, size_t size) {
    EXPECT_LE(size, std::max<size_t>(max_chunk, sizeof(float)));
    EXPECT_EQ(size % sizeof(float), 0u);
    const float* f = reinterpret_cast<const float*>(data);
    out.insert(out.end(), f, f + size / sizeof(float));
    ++*calls;
    return true;
  }));
  return out;
}

TEST(StreamCompact, StridedTensorInBoundedChunks) {
  std::vector<float> src(12);
  std::iota(src.begin(), src.end(), 0.f);
  std::vector<int64_t> shape{4, 3}, strides{1, 4};  // transpose of 3x4
  DLTensor t = View(src, shape, &strides);
  const std::vector<float> expected{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11};
  for (size_t max_chunk : {size_t{4}, size_t{12}, size_t{20}, size_t{48}, size_t{1000}}) {
    size_t calls = 0;
    EXPECT_EQ(Collect(t, max_chunk, &calls), expected) << max_chunk;
    if (max_chunk >= 48) {
      EXPECT_EQ(calls, 1u);
    } else if (max_chunk == 4) {
      EXPECT_EQ(calls, 12u);
    }
  }
}

TEST(StreamCompact, RowsLongerThanAChunkAreSplitAndShortOnesPacked) {
  std::vector<float> src(12);
  std::iota(src.begin(), src.end(), 0.f);
  // Rows of 5 broadcast from one row of 5 (stride 0 outside), 2 floats a chunk: rows are split
  // across chunks and a chunk may hold the end of one row and the start of the next.
  std::vector<int64_t> shape{3, 5}, strides{0, 1};
  size_t calls = 0;
  EXPECT_EQ(Collect(View(src, shape, &strides), 8, &calls),
            (std::vector<float>{0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4}));
  EXPECT_EQ(calls, 8u);  // 15 floats, 2 a chunk
  // Backwards (a negative stride, starting at the last element) and every other element.
  std::vector<int64_t> back_shape{6}, back_strides{-2};
  DLTensor back = View(src, back_shape, &back_strides);
  back.byte_offset = 11 * sizeof(float);
  EXPECT_EQ(Collect(back, 12, &calls), (std::vector<float>{11, 9, 7, 5, 3, 1}));
  EXPECT_EQ(calls, 2u);
}

TEST(StreamCompact, ABroadcastOfOneElementFillsWholeChunks) {
  std::vector<float> src{7};
  std::vector<int64_t> shape{1000}, strides{0};
  size_t calls = 0;
  EXPECT_EQ(Collect(View(src, shape, &strides), 64, &calls), std::vector<float>(1000, 7.f));
  EXPECT_EQ(calls, 63u);  // 62 chunks of 16 floats and one of 8
  // Merged dimensions: [2, 3, 4] whose two inner dimensions step evenly (strides 4, 1) but whose
  // outer one repeats them (stride 0) reads as two copies of the first 12 elements.
  std::vector<float> twelve(12);
  std::iota(twelve.begin(), twelve.end(), 0.f);
  std::vector<int64_t> repeat_shape{2, 3, 4}, repeat_strides{0, 4, 1};
  std::vector<float> expected(twelve);
  expected.insert(expected.end(), twelve.begin(), twelve.end());
  EXPECT_EQ(Collect(View(twelve, repeat_shape, &repeat_strides), 48, &calls), expected);
  EXPECT_EQ(calls, 2u);
}

TEST(StreamCompact, CompactTensorIsPassedThroughAndEmptyGivesNothing) {
  std::vector<float> src(10);
  std::iota(src.begin(), src.end(), 0.f);
  std::vector<int64_t> shape{10};
  DLTensor t = View(src, shape, nullptr);
  size_t calls = 0;
  EXPECT_EQ(Collect(t, 16, &calls), src);
  EXPECT_EQ(calls, 3u);  // 16 + 16 + 8 bytes
  std::vector<int64_t> empty{0, 4}, empty_strides{4, 1};
  EXPECT_TRUE(Collect(View(src, empty, &empty_strides), 16, &calls).empty());
  EXPECT_EQ(calls, 0u);
}

TEST(StreamCompact, StopsWhenTheSinkSaysSo) {
  std::vector<float> src(8, 1.f);
  std::vector<int64_t> shape{8};
  int calls = 0;
  EXPECT_FALSE(StreamCompact(View(src, shape, nullptr), 4,
                             [&](const uint8_t*, size_t) { return ++calls < 2; }));
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace tensorbroker
