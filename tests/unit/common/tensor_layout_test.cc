// Validation of names, dtypes, shapes and strides: the first line of defence against untrusted
// requests. Each case asserts the exact code and that the message names the field.
#include "common/tensor_layout.h"

#include <gtest/gtest.h>

#include <string>

namespace tensorbroker {
namespace {

constexpr DLDataType kF32{kDLFloat, 32, 1};

TEST(ValidateName, AcceptsPathLikeNames) {
  for (const char* name : {"a", "frames/0", "model.v2/layer-1/weight_0", "A.B_c-d", "..a", "a.."}) {
    EXPECT_TRUE(ValidateName(name).ok()) << name;
  }
  EXPECT_TRUE(ValidateName(std::string(255, 'x')).ok());
}

TEST(ValidateName, RejectsBadNamesNamingTheField) {
  for (const std::string& name :
       {std::string(), std::string("/abs"), std::string("a//b"), std::string("a/../b"),
        std::string(".."), std::string("a/"), std::string("has space"), std::string("é"),
        std::string(256, 'x'), std::string("nul\0byte", 8)}) {
    absl::Status s = ValidateName(name);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_NE(s.message().find("name"), std::string::npos) << s;
  }
}

TEST(ValidateDType, AcceptsEveryDLPackDType) {
  const DLDataType ok[] = {{kDLBool, 8, 1},      {kDLInt, 8, 1},     {kDLInt, 16, 1},
                           {kDLInt, 32, 1},      {kDLInt, 64, 1},    {kDLUInt, 8, 1},
                           {kDLUInt, 64, 1},     {kDLFloat, 16, 1},  {kDLFloat, 32, 1},
                           {kDLFloat, 64, 1},    {kDLBfloat, 16, 1}, {kDLComplex, 64, 1},
                           {kDLComplex, 128, 1}, {kDLComplex, 32, 1}};
  for (const DLDataType& d : ok)
    EXPECT_TRUE(ValidateDType(d).ok()) << int(d.code) << "/" << int(d.bits);
  for (uint8_t code = kFloat8FirstCode; code <= kFloat8LastCode; ++code) {
    EXPECT_TRUE(ValidateDType({code, 8, 1}).ok()) << int(code);
  }
}

TEST(ValidateDType, RejectsUnknownCodesBitsAndLanes) {
  const DLDataType bad[] = {
      {99, 32, 1},     {kDLFloat, 32, 2},  {kDLFloat, 8, 1},    {kDLInt, 4, 1},
      {kDLBool, 1, 1}, {kDLBfloat, 32, 1}, {kDLComplex, 16, 1}, {3 /*opaque handle*/, 64, 1},
      {15, 6, 1},      {kDLFloat, 32, 0}};
  for (const DLDataType& d : bad) {
    absl::Status s = ValidateDType(d);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("dtype"), std::string::npos) << s;
  }
}

TEST(ComputeLayout, CompactStridesAndSizes) {
  auto layout = ComputeLayout({2, 3, 4}, kF32);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->strides, (std::vector<int64_t>{12, 4, 1}));
  EXPECT_EQ(layout->nbytes, 96u);
  EXPECT_EQ(layout->elements, 24u);
}

TEST(ComputeLayout, ZeroDimAndZeroSize) {
  auto scalar = ComputeLayout({}, kF32);
  ASSERT_TRUE(scalar.ok());
  EXPECT_TRUE(scalar->strides.empty());
  EXPECT_EQ(scalar->nbytes, 4u);
  auto empty = ComputeLayout({0, 5}, kF32);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->nbytes, 0u);
  EXPECT_EQ(empty->strides, (std::vector<int64_t>{5, 1}));
}

TEST(ComputeLayout, ExplicitStridesSpanTheirElements) {
  // Column-major 3x4: last element at 2*1 + 3*3 = 11 -> 12 elements.
  auto layout = ComputeLayout({3, 4}, kF32, {1, 3});
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(layout->nbytes, 48u);
  // Padded rows: stride 8 for 4 columns -> (1*8 + 3 + 1) = 12 elements.
  auto padded = ComputeLayout({2, 4}, kF32, {8, 1});
  ASSERT_TRUE(padded.ok());
  EXPECT_EQ(padded->nbytes, 48u);
  // Broadcast dimension.
  auto broadcast = ComputeLayout({5, 4}, kF32, {0, 1});
  ASSERT_TRUE(broadcast.ok());
  EXPECT_EQ(broadcast->nbytes, 16u);
}

TEST(ComputeLayout, RejectsMalformedShapesAndStrides) {
  struct Case {
    std::vector<int64_t> shape, strides;
    uint64_t nbytes;
    const char* field;
  } cases[] = {
      {{-1, 2}, {}, 0, "shape[0]"},
      {{int64_t{1} << 40, int64_t{1} << 40}, {}, 0, "shape"},
      // A zero dimension empties the tensor but does not excuse the others (found by
      // tests/fuzz/proto_request_fuzz: their compact strides overflowed int64).
      {{0, int64_t{1} << 40, int64_t{1} << 40}, {}, 0, "shape"},
      {{int64_t{1} << 61, 0, 2}, {}, 0, "shape"},  // 2^62 elements of 4 bytes
      {std::vector<int64_t>(33, 1), {}, 0, "shape"},
      {{2, 2}, {1}, 0, "strides"},
      {{2, 2}, {2, -1}, 0, "strides[1]"},
      {{2, 2}, {int64_t{1} << 62, 1}, 0, "strides[0]"},
      {{3, 4}, {4, 1}, 40, "strides"},  // needs 48 bytes
  };
  for (const Case& c : cases) {
    auto layout = ComputeLayout(c.shape, kF32, c.strides, c.nbytes);
    ASSERT_FALSE(layout.ok()) << c.field;
    EXPECT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(layout.status().message().find(c.field), std::string::npos) << layout.status();
  }
}

TEST(ComputeLayout, BufferSizeLargerThanSpanIsKept) {
  auto layout = ComputeLayout({3, 4}, kF32, {}, 4096);
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(layout->nbytes, 4096u);
}

}  // namespace
}  // namespace tensorbroker
