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

absl::StatusOr<std::unique_ptr<CudaSlab>> LegacyCudaSlab::Allocate(int ordinal, uint64_t bytes) {
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
      new LegacyCudaSlab(ordinal, static_cast<uint8_t*>(data), size, std::move(exported)));
}

LegacyCudaSlab::~LegacyCudaSlab() {
  if (cudaSetDevice(ordinal()) != cudaSuccess) return;
  if (cudaError_t e = cudaFree(data()); e != cudaSuccess) {
    Log(LogLevel::kError, "CUDA device ", ordinal(), ": cudaFree of a ", size(),
        "-byte slab failed: ", Describe(e));
  }
}

VmmCudaSlab::VmmCudaSlab(int ordinal, CudaMapping mapping, UniqueFd fd)
    : CudaSlab(ordinal, mapping.data(), mapping.size()),
      mapping_(std::move(mapping)),
      fd_(std::move(fd)) {}

absl::StatusOr<std::unique_ptr<CudaSlab>> VmmCudaSlab::Allocate(int ordinal, uint64_t bytes) {
  auto allocation = CudaAllocation::Create(ordinal, bytes);
  if (!allocation.ok()) {
    if (absl::IsResourceExhausted(allocation.status())) {
      return absl::ResourceExhaustedError(
          absl::StrCat("CUDA device ", ordinal, " has no room for a ", bytes, "-byte slab"));
    }
    return allocation.status();
  }
  auto fd = allocation->Export();
  if (!fd.ok()) return fd.status();
  return MapExported(ordinal, *allocation, *std::move(fd), bytes);
}

absl::StatusOr<std::unique_ptr<CudaSlab>> VmmCudaSlab::Adopt(int ordinal, UniqueFd fd,
                                                             uint64_t bytes) {
  auto allocation = CudaAllocation::Import(fd.get());
  if (!allocation.ok()) return allocation.status();
  return MapExported(ordinal, *allocation, std::move(fd), bytes);
}

absl::StatusOr<std::unique_ptr<CudaSlab>> VmmCudaSlab::MapExported(int ordinal,
                                                                   const CudaAllocation& allocation,
                                                                   UniqueFd fd, uint64_t bytes) {
  // The mapping and the descriptor keep the memory; the handle goes with `allocation`.
  auto mapping = CudaMapping::Map(allocation, bytes, ordinal, CudaAccess::kReadWrite);
  if (!mapping.ok()) return mapping.status();
  return std::unique_ptr<CudaSlab>(new VmmCudaSlab(ordinal, *std::move(mapping), std::move(fd)));
}

}  // namespace tensorbroker::daemon
