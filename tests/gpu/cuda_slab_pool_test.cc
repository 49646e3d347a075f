// CudaSlabPool on a real GPU: pooled and dedicated slabs, 2 MiB slab sizes, 256-byte aligned
// blocks, one IPC handle per slab, the bytes really in device memory, slabs freed with their
// last block, and the capacity enforced. Skipped, with the reason, where no GPU is usable.
#include "daemon/memory/cuda_slab_pool.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "common/cuda_devices.h"

namespace tensorbroker::daemon {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

class CudaSlabPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto gpus = CudaDevices();
    if (!gpus.ok()) GTEST_SKIP() << gpus.status().message();
  }
  CudaSlabPool MakePool(uint64_t capacity) {
    CudaSlabPoolOptions options;
    options.ordinal = 0;
    options.capacity_bytes = capacity;
    options.name_prefix = "test-";
    return CudaSlabPool(options);
  }
};

TEST_F(CudaSlabPoolTest, PooledBlocksShareOneSlabAlignedWithOneHandle) {
  CudaSlabPool pool = MakePool(1024 * kMiB);
  std::vector<std::string> removed;
  auto a = pool.Allocate(1000, BlockKind::kImmutable, "0", &removed);
  auto b = pool.Allocate(3000, BlockKind::kMutable, "0", &removed);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->segment, b->segment);
  EXPECT_EQ(a->segment_size, 64 * kMiB);
  EXPECT_EQ(a->offset % 256, 0u);
  EXPECT_EQ(b->offset % 256, 0u);
  EXPECT_NE(a->offset, b->offset);
  EXPECT_EQ(a->device.device_type, kDLCUDA);
  EXPECT_EQ(a->export_handle.size(), sizeof(cudaIpcMemHandle_t));
  EXPECT_EQ(a->export_handle, b->export_handle) << "one handle per slab, computed once";
  EXPECT_EQ(pool.Stats().segments, 1u);
  EXPECT_EQ(pool.Stats().used_bytes, 1024u + 3072u);
  pool.Free(*a, &removed);
  pool.Free(*b, &removed);
  EXPECT_EQ(removed, std::vector<std::string>{a->segment});
  EXPECT_EQ(pool.Stats().reserved_bytes, 0u);
}

TEST_F(CudaSlabPoolTest, LargeTensorGetsADedicatedSlabIn2MiBSteps) {
  CudaSlabPool pool = MakePool(1024 * kMiB);
  std::vector<std::string> removed;
  auto big = pool.Allocate(17 * kMiB + 1, BlockKind::kImmutable, "0", &removed);
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(big->offset, 0u);
  EXPECT_EQ(big->segment_size, 18 * kMiB);  // 17 MiB + 1 byte, rounded up to 2 MiB steps
  auto small = pool.Allocate(100, BlockKind::kImmutable, "0", &removed);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_NE(small->segment, big->segment) << "a dedicated slab is never shared";
  pool.Free(*big, &removed);
  pool.Free(*small, &removed);
}

TEST_F(CudaSlabPoolTest, BytesLiveInDeviceMemory) {
  CudaSlabPool pool = MakePool(256 * kMiB);
  std::vector<std::string> removed;
  auto block = pool.Allocate(4096, BlockKind::kImmutable, "0", &removed);
  ASSERT_TRUE(block.ok()) << block.status();
  std::vector<uint32_t> in(1024), out(1024, 0);
  std::iota(in.begin(), in.end(), 7u);
  ASSERT_EQ(cudaMemcpy(block->data, in.data(), 4096, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(out.data(), block->data, 4096, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(in, out);
  cudaPointerAttributes attributes{};
  ASSERT_EQ(cudaPointerGetAttributes(&attributes, block->data), cudaSuccess);
  EXPECT_EQ(attributes.type, cudaMemoryTypeDevice);
  pool.Free(*block, &removed);
}

TEST_F(CudaSlabPoolTest, FreeingTheLastBlockGivesTheSlabBackToTheDevice) {
  size_t free_before = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
  {
    CudaSlabPool pool = MakePool(2048 * kMiB);
    std::vector<std::string> removed;
    auto block = pool.Allocate(1024 * kMiB, BlockKind::kImmutable, "0", &removed);
    ASSERT_TRUE(block.ok()) << block.status();
    size_t free_holding = 0;
    ASSERT_EQ(cudaMemGetInfo(&free_holding, &total), cudaSuccess);
    EXPECT_GE(free_before - free_holding, 1024 * kMiB);
    pool.Free(*block, &removed);
    EXPECT_EQ(removed.size(), 1u);
    EXPECT_EQ(pool.Stats().segments, 0u);
  }
  size_t free_after = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
  EXPECT_LT(free_before - std::min(free_before, free_after), 64 * kMiB);
}

TEST_F(CudaSlabPoolTest, CapacityIsEnforcedWithResourceExhausted) {
  CudaSlabPool pool = MakePool(32 * kMiB);
  std::vector<std::string> removed;
  auto too_big = pool.Allocate(40 * kMiB, BlockKind::kImmutable, "0", &removed);
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(too_big.status().message().find("cuda-capacity"), std::string::npos);
  // A pooled slab shrinks to what is left rather than failing.
  auto fits = pool.Allocate(1000, BlockKind::kImmutable, "0", &removed);
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_EQ(fits->segment_size, 32 * kMiB);
  pool.Free(*fits, &removed);
}

}  // namespace
}  // namespace tensorbroker::daemon
