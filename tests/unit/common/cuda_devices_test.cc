// CudaDevices() on whatever machine runs the tests: either real devices with distinct UUIDs and
// ordinals 0..n-1, or FAILED_PRECONDITION saying why (no CUDA in the build, no usable GPU).
#include "common/cuda_devices.h"

#include <gtest/gtest.h>

#include <set>

namespace tensorbroker {
namespace {

TEST(CudaDevices, ListsDevicesOrSaysWhyThereAreNone) {
  auto devices = CudaDevices();
  if (devices.ok()) {
    ASSERT_FALSE(devices->empty());
    std::set<CudaUuid> uuids;
    for (size_t i = 0; i < devices->size(); ++i) {
      const CudaDevice& d = (*devices)[i];
      EXPECT_EQ(d.ordinal, static_cast<int>(i));
      EXPECT_FALSE(d.name.empty());
      EXPECT_GT(d.total_bytes, 0u);
      uuids.insert(d.uuid);
      auto ordinal = CudaOrdinalOf(d.uuid);
      ASSERT_TRUE(ordinal.ok()) << ordinal.status();
      EXPECT_EQ(*ordinal, d.ordinal);
    }
    EXPECT_EQ(uuids.size(), devices->size()) << "UUIDs must tell devices apart";
    std::cout << "CUDA devices: " << devices->size() << "\n";
    return;
  }
  EXPECT_EQ(devices.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string why(devices.status().message());
  if (BuiltWithCuda()) {
    EXPECT_EQ(why.rfind("no usable GPU: ", 0), 0u) << why;
  } else {
    EXPECT_EQ(why.rfind("this build has no CUDA support", 0), 0u) << why;
  }
  std::cout << "no CUDA device here: " << why << "\n";
  // The same answer every time (probed once).
  EXPECT_EQ(CudaDevices().status(), devices.status());
  EXPECT_EQ(CudaOrdinalOf(CudaUuid{}).status(), devices.status());
}

TEST(CudaDevices, UnknownUuidIsNotVisible) {
  CudaUuid unknown;
  unknown.fill(0xee);
  auto ordinal = CudaOrdinalOf(unknown);
  ASSERT_FALSE(ordinal.ok());
  if (CudaDevices().ok()) {
    EXPECT_EQ(ordinal.status().code(), absl::StatusCode::kNotFound);
  }
}

TEST(CudaUuidText, FormatsLikeNvidiaSmi) {
  CudaUuid uuid;
  for (size_t i = 0; i < uuid.size(); ++i) uuid[i] = static_cast<uint8_t>(i * 17);
  EXPECT_EQ(CudaUuidText(uuid), "GPU-00112233-4455-6677-8899-aabbccddeeff");
}

}  // namespace
}  // namespace tensorbroker
