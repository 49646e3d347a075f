// What the CUDA code of common/ shares, for builds with CUDA support only (the header includes
// the toolkit's): errors of the runtime and the driver as absl::Status, the driver's functions
// reached through the runtime (cudaGetDriverEntryPointByVersion: nothing links libcuda, so
// binaries still start on machines without the driver), and a scoped current device.
// Thread-safe, except ScopedCudaDevice, which belongs to the thread that made it.
#ifndef TENSORBROKER_COMMON_CUDA_DRIVER_H_
#define TENSORBROKER_COMMON_CUDA_DRIVER_H_

#ifndef TENSORBROKER_HAVE_CUDA
#error "common/cuda_driver.h is for builds with CUDA support (TENSORBROKER_HAVE_CUDA)"
#endif

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <string>

#include "absl/status/status.h"

namespace tensorbroker {

// `call` failed with `error`: RESOURCE_EXHAUSTED when out of memory, INVALID_ARGUMENT for a bad
// value or device, FAILED_PRECONDITION when the device or driver cannot do it, else INTERNAL;
// the message names the call and the error. Clears the runtime's last (non-sticky) error.
absl::Status CudaRuntimeFailed(const std::string& call, cudaError_t error);
absl::Status CudaDriverFailed(const std::string& call, CUresult error);

// The driver's `symbol` at the CUDA 12.0 ABI, or null when the driver (or the runtime) has none.
void* CudaDriverEntryPoint(const char* symbol);

// Makes `ordinal` the calling thread's current device until destroyed, then puts back exactly
// the context the thread had, none included. (Restoring with cudaSetDevice(previous) would
// create a context on device 0 for every thread that had none: hundreds of MiB on a GPU the
// process may never use.)
class ScopedCudaDevice {
 public:
  explicit ScopedCudaDevice(int ordinal);
  ~ScopedCudaDevice();
  ScopedCudaDevice(const ScopedCudaDevice&) = delete;
  ScopedCudaDevice& operator=(const ScopedCudaDevice&) = delete;

  // Whether the device could be made current (cudaSetDevice's answer).
  absl::Status status() const;

 private:
  int ordinal_;
  CUcontext saved_context_ = nullptr;
  bool know_context_ = false;
  int previous_ = -1;
  bool changed_ = false;
  cudaError_t status_ = cudaSuccess;
};

}  // namespace tensorbroker

#endif  // TENSORBROKER_COMMON_CUDA_DRIVER_H_
