// One slab of CUDA device memory owned by the daemon: cudaMalloc'd on one device, its size a
// multiple of 2 MiB, exported once as a legacy CUDA IPC handle. The handle maps the whole
// allocation, so consumers address a tensor in it as (handle, offset).
//
// Ownership: cudaFree on destruction. Destroy a slab only when no consumer can still have its
// handle open, i.e. when no lease on any tensor in it remains: freeing memory that another
// process has open is undefined behaviour in CUDA.
// Not thread-safe. Built only with CUDA support (TENSORBROKER_HAVE_CUDA).
#ifndef TENSORBROKER_DAEMON_CUDA_SLAB_H_
#define TENSORBROKER_DAEMON_CUDA_SLAB_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace tensorbroker::daemon {

class CudaSlab {
 public:
  // Slab sizes are multiples of this (CUDA IPC works best on 2 MiB-aligned allocations).
  static constexpr uint64_t kGranularity = 2ull << 20;

  // `bytes` is rounded up to kGranularity. RESOURCE_EXHAUSTED when the device is out of memory.
  static absl::StatusOr<std::unique_ptr<CudaSlab>> Allocate(int ordinal, uint64_t bytes);
  ~CudaSlab();
  CudaSlab(const CudaSlab&) = delete;
  CudaSlab& operator=(const CudaSlab&) = delete;

  uint8_t* data() const { return data_; }  // a device pointer, in the daemon's context
  uint64_t size() const { return size_; }
  int ordinal() const { return ordinal_; }
  // The slab's cudaIpcMemHandle_t (64 bytes), as it travels on the wire.
  const std::string& ipc_handle() const { return ipc_handle_; }

 private:
  CudaSlab(int ordinal, uint8_t* data, uint64_t size, std::string ipc_handle)
      : ordinal_(ordinal), data_(data), size_(size), ipc_handle_(std::move(ipc_handle)) {}

  int ordinal_;
  uint8_t* data_;
  uint64_t size_;
  std::string ipc_handle_;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_CUDA_SLAB_H_
