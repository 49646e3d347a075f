#include "daemon/memory/cuda_slab.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "daemon/base/log.h"
#include "daemon/memory/memory_pool.h"

namespace tensorbroker::daemon {
namespace {

std::string Describe(cudaError_t error) {
  return absl::StrCat(cudaGetErrorName(error), " (", cudaGetErrorString(error), ")");
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaSlab>> CudaSlab::Allocate(int ordinal, uint64_t bytes) {
  const uint64_t size = RoundUp(std::max<uint64_t>(bytes, 1), kGranularity);
  if (cudaError_t e = cudaSetDevice(ordinal); e != cudaSuccess) {
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA device ", ordinal, ": cudaSetDevice: ", Describe(e)));
  }
  void* data = nullptr;
  if (cudaError_t e = cudaMalloc(&data, size); e != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky, but leave no error behind for the next call
    if (e == cudaErrorMemoryAllocation) {
      return absl::ResourceExhaustedError(
          absl::StrCat("CUDA device ", ordinal, " has no room for a ", size, "-byte slab"));
    }
    return absl::InternalError(
        absl::StrCat("CUDA device ", ordinal, ": cudaMalloc(", size, "): ", Describe(e)));
  }
  cudaIpcMemHandle_t handle{};
  if (cudaError_t e = cudaIpcGetMemHandle(&handle, data); e != cudaSuccess) {
    cudaFree(data);
    return absl::InternalError(
        absl::StrCat("CUDA device ", ordinal, ": cudaIpcGetMemHandle: ", Describe(e)));
  }
  std::string exported(reinterpret_cast<const char*>(&handle), sizeof(handle));
  return std::unique_ptr<CudaSlab>(
      new CudaSlab(ordinal, static_cast<uint8_t*>(data), size, std::move(exported)));
}

CudaSlab::~CudaSlab() {
  if (cudaSetDevice(ordinal_) != cudaSuccess) return;
  if (cudaError_t e = cudaFree(data_); e != cudaSuccess) {
    Log(LogLevel::kError, "CUDA device ", ordinal_, ": cudaFree of a ", size_,
        "-byte slab failed: ", Describe(e));
  }
}

}  // namespace tensorbroker::daemon
