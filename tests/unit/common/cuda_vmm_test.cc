// common/cuda_vmm.h on whatever machine runs the unit tests. Without a usable GPU every call
// answers FAILED_PRECONDITION with CudaDevices()'s reason, and nothing is held; with one, the
// device's VMM support is reported (tests/gpu exercises allocations, descriptors and mappings).
// DescribeCudaVmm's words are what the daemon logs for each GPU.
#include "common/cuda_vmm.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include "common/cuda_devices.h"

namespace tensorbroker {
namespace {

TEST(CudaVmm, WithoutAUsableGpuEveryCallSaysWhy) {
  auto devices = CudaDevices();
  auto support = QueryCudaVmm(0);
  if (devices.ok()) {
    ASSERT_TRUE(support.ok()) << support.status();
    std::cout << "CUDA device 0: " << DescribeCudaVmm(*support) << "\n";
    GTEST_SKIP() << "a GPU is usable here: tests/gpu covers the calls";
  }
  EXPECT_EQ(support.status(), devices.status());
  EXPECT_EQ(CudaAllocation::Create(0, 2 << 20).status(), devices.status());
  UniqueFd not_an_allocation(::memfd_create("not-cuda", MFD_CLOEXEC));
  EXPECT_EQ(CudaAllocation::Import(not_an_allocation.get()).status(), devices.status());
}

TEST(CudaVmm, DescribesWhatADeviceLacks) {
  CudaVmmSupport support;
  EXPECT_EQ(DescribeCudaVmm(support),
            "no virtual memory management (VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED 0)");
  support.vmm = true;
  EXPECT_EQ(DescribeCudaVmm(support),
            "VMM without POSIX descriptors (HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED 0)");
  support.posix_fd = true;
  EXPECT_FALSE(support.usable());
  support.granularity = 2 << 20;
  EXPECT_TRUE(support.usable());
  EXPECT_EQ(DescribeCudaVmm(support), "VMM with POSIX descriptors, 2.0 MiB granularity");
}

}  // namespace
}  // namespace tensorbroker
