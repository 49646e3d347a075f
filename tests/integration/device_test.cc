// Devices through the C++ client on a machine without a usable GPU (this project's CI): CUDA and
// pinned requests are refused with FAILED_PRECONDITION carrying the reason, nothing is left
// behind, and CPU tensors work as before. Where a GPU is usable these tests skip: the GPU tests
// (tests/gpu, label gpu) cover the same calls succeeding.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/cuda_devices.h"
#include "tests/integration/test_util.h"

namespace tensorbroker::testing {
namespace {

using absl::StatusCode;

class DeviceTest : public BrokerTest {
 protected:
  std::vector<std::string> ExtraArgs() const override {
    return {"--cuda-capacity", "1G", "--log-level", "warning"};
  }
  void SetUp() override {
    if (CudaDevices().ok()) GTEST_SKIP() << "a GPU is usable here: the gpu tests cover this";
    BrokerTest::SetUp();
  }
  static std::string NoGpuReason() { return std::string(CudaDevices().status().message()); }

  void ExpectNothingLeft() {
    ASSERT_OK_AND_ASSIGN(BrokerStats stats, client().Stats());
    EXPECT_EQ(stats.pending, 0u);
    EXPECT_EQ(stats.leases, 0u);
    EXPECT_EQ(stats.used_bytes, 0u);
  }
};

TEST_F(DeviceTest, CreateOnCudaIsFailedPreconditionWithTheReason) {
  CreateOptions options;
  options.device = {kDLCUDA, 0};
  auto created = client().Create("gpu/x", {4}, dtypes::kFloat32, options);
  EXPECT_CODE(created, StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(created.status().message(), NoGpuReason())) << created.status();
  EXPECT_TRUE(absl::StrContains(created.status().message(), "cuda:0")) << created.status();
  ExpectNothingLeft();
}

TEST_F(DeviceTest, PutFromCudaMemoryIsFailedPreconditionBeforeAnyCopy) {
  // The pointer is never dereferenced: the refusal comes before any copy.
  float not_device_memory[4] = {1, 2, 3, 4};
  std::vector<int64_t> shape = {4};
  DLTensor source = HostTensor(not_device_memory, shape, dtypes::kFloat32);
  source.device = {kDLCUDA, 0};
  auto put = client().Put("gpu/x", source);
  EXPECT_CODE(put, StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(put.status().message(), NoGpuReason())) << put.status();
  // A CPU source asked into device memory is refused the same way.
  PutOptions to_gpu;
  to_gpu.device = DLDevice{kDLCUDA, 0};
  EXPECT_CODE(PutFloats(client(), "gpu/y", {1, 2}, to_gpu), StatusCode::kFailedPrecondition);
  ExpectNothingLeft();
  ASSERT_OK_AND_ASSIGN(auto names, client().List());
  EXPECT_TRUE(names.empty());
}

TEST_F(DeviceTest, UnknownDeviceTypesAreInvalidArgument) {
  CreateOptions rocm;
  rocm.device = {kDLROCM, 0};
  EXPECT_CODE(client().Create("gpu/x", {4}, dtypes::kFloat32, rocm), StatusCode::kInvalidArgument);
  float data[2] = {1, 2};
  std::vector<int64_t> shape = {2};
  DLTensor vulkan = HostTensor(data, shape, dtypes::kFloat32);
  vulkan.device = {kDLVulkan, 0};
  EXPECT_CODE(client().Put("gpu/x", vulkan), StatusCode::kInvalidArgument);
  ExpectNothingLeft();
}

TEST_F(DeviceTest, PinnedGetIsFailedPreconditionAndReleasesItsLease) {
  ASSERT_OK(PutFloats(client(), "pin/x", {1, 2, 3}));
  GetOptions pinned;
  pinned.pinned = true;
  auto got = client().Get("pin/x", pinned);
  EXPECT_CODE(got, StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StartsWith(got.status().message(), "pinned: ")) << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), NoGpuReason())) << got.status();
  EXPECT_EQ(LeasesOf(client(), "pin/x"), 0);
  EXPECT_EQ(CurrentProcessMappings().pinned_segments, 0u);
  // The same tensor, unpinned, is fine.
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw, client().Get("pin/x"));
  TensorPtr plain(raw);
  EXPECT_EQ(plain->dl_tensor.device.device_type, kDLCPU);
  EXPECT_EQ(FloatsOf(plain->dl_tensor), (std::vector<float>{1, 2, 3}));
}

TEST_F(DeviceTest, PinnedCreateIsFailedPreconditionAndAbortsTheReservation) {
  CreateOptions options;
  options.pinned = true;
  EXPECT_CODE(client().Create("pin/y", {8}, dtypes::kInt32, options),
              StatusCode::kFailedPrecondition);
  // kDLCUDAHost means the same: CPU memory, mapped pinned.
  CreateOptions host;
  host.device = {kDLCUDAHost, 0};
  EXPECT_CODE(client().Create("pin/y", {8}, dtypes::kInt32, host), StatusCode::kFailedPrecondition);
  ExpectNothingLeft();
  // The name is free again.
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw,
                       client().Create("pin/y", {8}, dtypes::kInt32));
  TensorPtr created(raw);
  ASSERT_OK(client().Seal("pin/y"));
}

TEST_F(DeviceTest, GetOnAnotherDeviceIsFailedPreconditionNamingWhereItIs) {
  ASSERT_OK(PutFloats(client(), "where/x", {1, 2}));
  GetOptions on_gpu;
  on_gpu.device = DLDevice{kDLCUDA, 0};
  auto got = client().Get("where/x", on_gpu);
  EXPECT_CODE(got, StatusCode::kFailedPrecondition);
  EXPECT_EQ(got.status().message(),
            "device: tensor 'where/x' is on cpu, not cuda:0 (Get does not copy; Put a copy on "
            "the device you need)");
  EXPECT_EQ(LeasesOf(client(), "where/x"), 0);
  GetOptions on_cpu;
  on_cpu.device = DLDevice{kDLCPU, 0};
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw, client().Get("where/x", on_cpu));
  TensorPtr held(raw);
  EXPECT_EQ(FloatsOf(held->dl_tensor), (std::vector<float>{1, 2}));
}

TEST_F(DeviceTest, SealStreamOnlyConcernsCudaTensors) {
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw,
                       client().Create("cpu/s", {2}, dtypes::kInt8));
  TensorPtr created(raw);
  SealOptions options;
  options.cuda_stream = 12345;  // never touched for a CPU tensor
  ASSERT_OK_AND_ASSIGN(TensorInfo info, client().Seal("cpu/s", options));
  EXPECT_TRUE(info.sealed);
}

TEST_F(DeviceTest, StatsListTheCpuPoolOnlyAndMappingsHaveNoCudaSlabs) {
  ASSERT_OK_AND_ASSIGN(BrokerStats stats, client().Stats());
  ASSERT_EQ(stats.pools.size(), 1u);
  EXPECT_EQ(stats.pools[0].device.device_type, kDLCPU);
  EXPECT_EQ(stats.pools[0].capacity_bytes, stats.capacity_bytes);
  EXPECT_EQ(stats.pools[0].segments, stats.segments);
  EXPECT_EQ(stats.pools[0].handles, "memfd");
  ASSERT_OK(PutFloats(client(), "cpu/m", {5}));
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw, client().Get("cpu/m"));
  TensorPtr got(raw);
  const ProcessMappings mappings = CurrentProcessMappings();
  EXPECT_GE(mappings.cached_segments, 1u);
  EXPECT_EQ(mappings.open_cuda_slabs, 0u);
  EXPECT_EQ(mappings.cached_cuda_slabs, 0u);
  EXPECT_EQ(mappings.pinned_segments, 0u);
  ASSERT_OK_AND_ASSIGN(stats, client().Stats());
  EXPECT_EQ(stats.pools[0].used_bytes, stats.used_bytes);
  EXPECT_GT(stats.used_bytes, 0u);
}

}  // namespace
}  // namespace tensorbroker::testing
