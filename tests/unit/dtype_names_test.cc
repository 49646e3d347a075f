// NumPy spellings round-trip for every dtype the broker accepts.
#include "common/dtype_names.h"

#include <gtest/gtest.h>

#include "common/tensor_layout.h"

namespace tensorbroker {
namespace {

TEST(DTypeNames, RoundTripEveryValidDType) {
  int named = 0;
  for (int code = 0; code < 20; ++code) {
    for (int bits : {8, 16, 32, 64, 128}) {
      const DLDataType dtype{static_cast<uint8_t>(code), static_cast<uint8_t>(bits), 1};
      if (!ValidateDType(dtype).ok()) continue;
      const std::string name = DTypeName(dtype);
      auto parsed = ParseDTypeName(name);
      ASSERT_TRUE(parsed.ok()) << name;
      EXPECT_EQ(parsed->code, dtype.code);
      EXPECT_EQ(parsed->bits, dtype.bits);
      EXPECT_EQ(parsed->lanes, 1);
      ++named;
    }
  }
  EXPECT_EQ(named, 24);
}

TEST(DTypeNames, NumPySpellings) {
  EXPECT_EQ(DTypeName({kDLFloat, 32, 1}), "float32");
  EXPECT_EQ(DTypeName({kDLBool, 8, 1}), "bool");
  EXPECT_EQ(DTypeName({kDLBfloat, 16, 1}), "bfloat16");
  EXPECT_EQ(DTypeName({kDLComplex, 64, 1}), "complex64");
  EXPECT_EQ(DTypeName({kDLComplex, 32, 1}), "complex32");
  EXPECT_EQ(DTypeName({10, 8, 1}), "float8_e4m3fn");
  EXPECT_EQ(DTypeName({kDLFloat, 32, 4}), "dtype(code=2,bits=32,lanes=4)");
  EXPECT_EQ(ParseDTypeName("float128").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tensorbroker
