// CUDA tensors through the real daemon and the real client library, on a real GPU: device
// memory owned by tensorbrokerd (a separate process), reached through CUDA IPC; Put copies in
// every direction with strides; Seal waits for the producer's stream; pinned CPU mappings; the
// slab handle opened once and closed with its last tensor; device memory freed with the last
// lease. Skipped, with the reason, where no GPU is usable. (Producer and consumer in different
// processes with PyTorch and CuPy: tests/python/gpu.)
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "common/cuda_devices.h"
#include "tests/integration/test_util.h"

namespace tensorbroker::testing {
namespace {

#define ASSERT_CUDA(expr)                                                              \
  do {                                                                                 \
    const cudaError_t tb_cuda_ = (expr);                                               \
    ASSERT_EQ(tb_cuda_, cudaSuccess) << #expr << ": " << cudaGetErrorString(tb_cuda_); \
  } while (0)

class CudaBrokerTest : public BrokerTest {
 protected:
  std::vector<std::string> ExtraArgs() const override {
    return {"--cuda-capacity", "2G", "--log-level", "warning"};
  }
  void SetUp() override {
    auto gpus = CudaDevices();
    if (!gpus.ok()) GTEST_SKIP() << gpus.status().message();
    BrokerTest::SetUp();
  }

  static std::vector<float> Iota(size_t n, float start = 0) {
    std::vector<float> v(n);
    std::iota(v.begin(), v.end(), start);
    return v;
  }
  // The compact bytes of a device tensor, read back to the host.
  static std::vector<float> DeviceFloats(const DLTensor& t) {
    std::vector<float> out(ElementsOf(t));
    EXPECT_EQ(cudaMemcpy(out.data(), DataOf(t), out.size() * sizeof(float), cudaMemcpyDefault),
              cudaSuccess);
    return out;
  }
  const PoolUsage* GpuPool(const BrokerStats& stats) {
    for (const PoolUsage& pool : stats.pools) {
      if (pool.device.device_type == kDLCUDA && pool.device.device_id == 0) return &pool;
    }
    ADD_FAILURE() << "no cuda:0 pool in Stats";
    return nullptr;
  }
};

TEST_F(CudaBrokerTest, CreateSealGetSharesTheDaemonsDeviceMemory) {
  const std::vector<float> values = Iota(100 * 10000, 0.5f);
  CreateOptions on_gpu;
  on_gpu.device = {kDLCUDA, 0};
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw,
                       client().Create("gpu/a", {100, 10000}, dtypes::kFloat32, on_gpu));
  TensorPtr produced(raw);
  EXPECT_EQ(produced->dl_tensor.device.device_type, kDLCUDA);
  EXPECT_EQ(produced->dl_tensor.device.device_id, 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(produced->dl_tensor.data) % 256, 0u);
  ASSERT_CUDA(cudaMemcpy(produced->dl_tensor.data, values.data(), values.size() * sizeof(float),
                         cudaMemcpyHostToDevice));
  ASSERT_OK(client().Seal("gpu/a"));
  produced.reset();

  std::unique_ptr<Client> consumer = NewClient();
  ASSERT_OK_AND_ASSIGN(raw, consumer->Get("gpu/a"));
  TensorPtr got(raw);
  EXPECT_EQ(got->dl_tensor.device.device_type, kDLCUDA);
  EXPECT_EQ(got->dl_tensor.device.device_id, 0);
  EXPECT_NE(got->flags & DLPACK_FLAG_BITMASK_READ_ONLY, 0u);
  EXPECT_EQ(DeviceFloats(got->dl_tensor), values);
  cudaPointerAttributes attributes{};
  ASSERT_CUDA(cudaPointerGetAttributes(&attributes, got->dl_tensor.data));
  EXPECT_EQ(attributes.type, cudaMemoryTypeDevice);
  EXPECT_EQ(CurrentProcessMappings().open_cuda_slabs, 1u);
  ASSERT_OK_AND_ASSIGN(TensorInfo described, consumer->Describe(*got));
  EXPECT_EQ(described.device.device_type, kDLCUDA);

  ASSERT_OK_AND_ASSIGN(BrokerStats stats, client().Stats());
  const PoolUsage* gpu = GpuPool(stats);
  ASSERT_NE(gpu, nullptr);
  EXPECT_GE(gpu->used_bytes, values.size() * sizeof(float));
  EXPECT_EQ(stats.used_bytes, 0u);  // nothing in CPU memory

  // Unpublished but leased: the memory stays; the last release frees the slab.
  ASSERT_OK(client().Delete("gpu/a"));
  EXPECT_EQ(DeviceFloats(got->dl_tensor), values);
  got.reset();
  EXPECT_EQ(CurrentProcessMappings().open_cuda_slabs, 0u);
  // The consumer's release is queued on its own connection; its Stats carries it to the daemon
  // first (another Client's call would not wait for it).
  ASSERT_OK_AND_ASSIGN(stats, consumer->Stats());
  gpu = GpuPool(stats);
  ASSERT_NE(gpu, nullptr);
  EXPECT_EQ(gpu->used_bytes, 0u);
  EXPECT_EQ(gpu->segments, 0u);
}

TEST_F(CudaBrokerTest, TensorsInOneSlabShareOneOpenHandle) {
  PutOptions on_gpu;
  on_gpu.device = DLDevice{kDLCUDA, 0};
  ASSERT_OK(PutFloats(client(), "gpu/s1", {1, 2, 3}, on_gpu));
  ASSERT_OK(PutFloats(client(), "gpu/s2", {4, 5}, on_gpu));
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw, client().Get("gpu/s1"));
  TensorPtr first(raw);
  ASSERT_OK_AND_ASSIGN(raw, client().Get("gpu/s2"));
  TensorPtr second(raw);
  EXPECT_EQ(CurrentProcessMappings().open_cuda_slabs, 1u);
  EXPECT_EQ(DeviceFloats(first->dl_tensor), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(DeviceFloats(second->dl_tensor), (std::vector<float>{4, 5}));
  first.reset();
  EXPECT_EQ(CurrentProcessMappings().open_cuda_slabs, 1u);  // second still holds the slab
  second.reset();
  EXPECT_EQ(CurrentProcessMappings().open_cuda_slabs, 0u);
  // Asking for it on the CPU is refused (Get never copies), and nothing stays open.
  GetOptions on_cpu;
  on_cpu.device = DLDevice{kDLCPU, 0};
  EXPECT_CODE(client().Get("gpu/s1", on_cpu), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CurrentProcessMappings().open_cuda_slabs, 0u);
  EXPECT_EQ(LeasesOf(client(), "gpu/s1"), 0);
}

TEST_F(CudaBrokerTest, PutCopiesStridedHostAndDeviceSourcesEitherWay) {
  // A 3x4 host matrix seen transposed (4x3, strides {1, 4}).
  std::vector<float> host = Iota(12);
  std::vector<int64_t> shape = {4, 3};
  int64_t strides[2] = {1, 4};
  DLTensor transposed = HostTensor(host.data(), shape, dtypes::kFloat32, strides);
  const std::vector<float> expected = {0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11};
  PutOptions on_gpu;
  on_gpu.device = DLDevice{kDLCUDA, 0};
  ASSERT_OK(client().Put("gpu/t", transposed, on_gpu));
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw, client().Get("gpu/t"));
  TensorPtr on_device(raw);
  EXPECT_EQ(on_device->dl_tensor.device.device_type, kDLCUDA);
  EXPECT_EQ(DeviceFloats(on_device->dl_tensor), expected);

  // The same transposed view of device memory, put to the GPU (default) and to the CPU.
  void* source = nullptr;
  ASSERT_CUDA(cudaMalloc(&source, host.size() * sizeof(float)));
  ASSERT_CUDA(cudaMemcpy(source, host.data(), host.size() * sizeof(float), cudaMemcpyDefault));
  DLTensor device_view = transposed;
  device_view.data = source;
  device_view.device = {kDLCUDA, 0};
  ASSERT_OK(client().Put("gpu/d2d", device_view));
  PutOptions to_cpu;
  to_cpu.device = DLDevice{kDLCPU, 0};
  ASSERT_OK(client().Put("gpu/d2h", device_view, to_cpu));
  ASSERT_CUDA(cudaFree(source));
  ASSERT_OK_AND_ASSIGN(raw, client().Get("gpu/d2d"));
  TensorPtr d2d(raw);
  EXPECT_EQ(d2d->dl_tensor.device.device_type, kDLCUDA);
  EXPECT_EQ(DeviceFloats(d2d->dl_tensor), expected);
  ASSERT_OK_AND_ASSIGN(raw, client().Get("gpu/d2h"));
  TensorPtr d2h(raw);
  EXPECT_EQ(d2h->dl_tensor.device.device_type, kDLCPU);
  EXPECT_EQ(FloatsOf(d2h->dl_tensor), expected);
}

TEST_F(CudaBrokerTest, SealWaitsForTheProducersStream) {
  CreateOptions on_gpu;
  on_gpu.device = {kDLCUDA, 0};
  const int64_t n = 64 << 20;  // 64 MiB of int8: long enough to still run after the launch
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw,
                       client().Create("gpu/stream", {n}, dtypes::kInt8, on_gpu));
  TensorPtr produced(raw);
  cudaStream_t stream = nullptr;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // The stream's work starts with a host function that holds it for a while, so it is surely
  // still pending when Seal is called; the writes follow it on the same stream.
  static std::atomic<bool> held_work_done{false};
  held_work_done = false;
  ASSERT_CUDA(cudaLaunchHostFunc(
      stream,
      [](void*) {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        held_work_done = true;
      },
      nullptr));
  for (int i = 1; i <= 8; ++i) {
    ASSERT_CUDA(cudaMemsetAsync(produced->dl_tensor.data, i, static_cast<size_t>(n), stream));
  }
  SealOptions seal;
  seal.cuda_stream = reinterpret_cast<uintptr_t>(stream);
  ASSERT_OK(client().Seal("gpu/stream", seal));
  // Seal returned only after all of the stream's work: the held host function and the writes.
  EXPECT_TRUE(held_work_done);
  EXPECT_EQ(cudaStreamQuery(stream), cudaSuccess);
  ASSERT_CUDA(cudaStreamDestroy(stream));
  produced.reset();
  std::unique_ptr<Client> consumer = NewClient();
  ASSERT_OK_AND_ASSIGN(raw, consumer->Get("gpu/stream"));
  TensorPtr got(raw);
  std::vector<int8_t> bytes(static_cast<size_t>(n));
  ASSERT_CUDA(cudaMemcpy(bytes.data(), got->dl_tensor.data, bytes.size(), cudaMemcpyDefault));
  EXPECT_EQ(std::count(bytes.begin(), bytes.end(), int8_t{8}), n);
}

TEST_F(CudaBrokerTest, MutableDeviceTensorWritesAreSeenByEveryHolder) {
  CreateOptions options;
  options.device = {kDLCUDA, 0};
  options.is_mutable = true;
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw,
                       client().Create("gpu/m", {4}, dtypes::kFloat32, options));
  TensorPtr producer(raw);
  ASSERT_CUDA(cudaMemset(producer->dl_tensor.data, 0, 16));
  ASSERT_OK(client().Seal("gpu/m"));
  std::unique_ptr<Client> other = NewClient();
  ASSERT_OK_AND_ASSIGN(raw, other->Get("gpu/m"));
  TensorPtr consumer(raw);
  EXPECT_EQ(consumer->flags & DLPACK_FLAG_BITMASK_READ_ONLY, 0u);
  const std::vector<float> written = {9, 8, 7, 6};
  ASSERT_CUDA(cudaMemcpy(consumer->dl_tensor.data, written.data(), 16, cudaMemcpyDefault));
  EXPECT_EQ(DeviceFloats(producer->dl_tensor), written);
}

TEST_F(CudaBrokerTest, PinnedGetIsPageLockedAndCopiesAsynchronously) {
  const std::vector<float> values = Iota(1 << 20, 3);
  std::vector<float> staged = values;
  std::vector<int64_t> shape = {static_cast<int64_t>(values.size())};
  ASSERT_OK(client().Put("pin/a", HostTensor(staged.data(), shape, dtypes::kFloat32)));
  GetOptions pinned;
  pinned.pinned = true;
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw, client().Get("pin/a", pinned));
  TensorPtr got(raw);
  EXPECT_EQ(got->dl_tensor.device.device_type, kDLCUDAHost);
  EXPECT_GE(CurrentProcessMappings().pinned_segments, 1u);
  cudaPointerAttributes attributes{};
  ASSERT_CUDA(cudaPointerGetAttributes(&attributes, got->dl_tensor.data));
  EXPECT_EQ(attributes.type, cudaMemoryTypeHost);
  void* device = nullptr;
  ASSERT_CUDA(cudaMalloc(&device, values.size() * sizeof(float)));
  cudaStream_t stream = nullptr;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  ASSERT_CUDA(cudaMemcpyAsync(device, got->dl_tensor.data, values.size() * sizeof(float),
                              cudaMemcpyHostToDevice, stream));
  ASSERT_CUDA(cudaStreamSynchronize(stream));
  std::vector<float> back(values.size());
  ASSERT_CUDA(cudaMemcpy(back.data(), device, back.size() * sizeof(float), cudaMemcpyDefault));
  EXPECT_EQ(back, values);
  ASSERT_CUDA(cudaStreamDestroy(stream));
  ASSERT_CUDA(cudaFree(device));
  // A second pinned tensor in the same segment reuses the registration.
  ASSERT_OK(PutFloats(client(), "pin/b", {1, 2}));
  const size_t pinned_before = CurrentProcessMappings().pinned_segments;
  ASSERT_OK_AND_ASSIGN(raw, client().Get("pin/b", pinned));
  TensorPtr second(raw);
  EXPECT_EQ(CurrentProcessMappings().pinned_segments, pinned_before);
  // Pinning a device tensor makes no sense: INVALID_ARGUMENT, lease released.
  PutOptions on_gpu;
  on_gpu.device = DLDevice{kDLCUDA, 0};
  ASSERT_OK(PutFloats(client(), "gpu/p", {1}, on_gpu));
  EXPECT_CODE(client().Get("gpu/p", pinned), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LeasesOf(client(), "gpu/p"), 0);
}

TEST_F(CudaBrokerTest, GetReleaseCyclesLeaveNoHandleOpenAndNoDeviceMemoryHeld) {
  PutOptions on_gpu;
  on_gpu.device = DLDevice{kDLCUDA, 0};
  ASSERT_OK(PutFloats(client(), "gpu/cycle", Iota(1000), on_gpu));
  // Each cycle opens the slab's handle and closes it again with the tensor.
  for (int i = 0; i < 1000; ++i) {
    ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw, client().Get("gpu/cycle"));
    TensorPtr got(raw);
    ASSERT_EQ(got->dl_tensor.device.device_type, kDLCUDA);
  }
  EXPECT_EQ(CurrentProcessMappings().open_cuda_slabs, 0u);
  ASSERT_OK(client().Delete("gpu/cycle"));
  ASSERT_OK_AND_ASSIGN(BrokerStats stats, client().Stats());
  const PoolUsage* gpu = GpuPool(stats);
  ASSERT_NE(gpu, nullptr);
  EXPECT_EQ(gpu->used_bytes, 0u);
  EXPECT_EQ(gpu->segments, 0u);
  EXPECT_EQ(stats.leases, 0u);
}

}  // namespace
}  // namespace tensorbroker::testing
