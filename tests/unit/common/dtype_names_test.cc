// NumPy spellings round-trip for every dtype the broker accepts.
#include "tensorbroker/dtype_names.h"

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

TEST(DeviceNames, ParseIsTheInverseOfDeviceNameForCpuAndCuda) {
  for (DLDevice device : {DLDevice{kDLCPU, 0}, DLDevice{kDLCUDA, 0}, DLDevice{kDLCUDA, 7}}) {
    auto parsed = ParseDeviceName(DeviceName(device));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(parsed->device_type, device.device_type);
    EXPECT_EQ(parsed->device_id, device.device_id);
  }
  auto bare = ParseDeviceName("cuda");
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->device_type, kDLCUDA);
  EXPECT_EQ(bare->device_id, 0);
  for (const char* bad : {"", "CPU", "gpu", "cuda:", "cuda:-1", "cuda:x", "cuda:0:1", "cuda_host",
                          "cuda:99999999999"}) {
    auto parsed = ParseDeviceName(bad, "--device");
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(parsed.status().message().substr(0, 8), "--device") << bad;
  }
}

}  // namespace
}  // namespace tensorbroker
