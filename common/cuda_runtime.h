// The CUDA runtime calls made outside the daemon's slab code, as absl::Status-returning
// functions: copies between host and device, stream and device synchronisation, opening CUDA IPC
// handles and pinning host memory. Every function works in a build without CUDA support or on a
// machine without a usable GPU: it then answers FAILED_PRECONDITION with CudaDevices()'s reason.
//
// Streams are passed as the integer value of a cudaStream_t (0 is the legacy default stream),
// so callers need no CUDA headers. Functions that pick a device restore the calling thread's
// current device before returning. Thread-safe (the CUDA runtime is).
#ifndef TENSORBROKER_COMMON_CUDA_RUNTIME_H_
#define TENSORBROKER_COMMON_CUDA_RUNTIME_H_

#include <dlpack/dlpack.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tensorbroker {

// OK when this process can use CUDA; FAILED_PRECONDITION with the reason otherwise.
absl::Status CudaUsable();

// Copies `src` (CPU, pinned host or CUDA memory; any strides, byte_offset) into the compact C-order
// buffer `dst` on `dst_device` (CPU or CUDA). Complete when this returns: the copy runs on the
// legacy default stream of the CUDA side's device, which is then synchronised.
absl::Status CopyToCompactOnDevice(const DLTensor& src, void* dst, DLDevice dst_device);

// Copies `bytes` between any two of host and device memory (unified addressing); complete when
// this returns.
absl::Status CudaCopy(void* dst, const void* src, uint64_t bytes, int ordinal);

// Waits for the work queued on `stream` (a cudaStream_t's value) of device `ordinal`.
absl::Status CudaSynchronizeStream(uintptr_t stream, int ordinal);
// Waits for all work queued on device `ordinal`.
absl::Status CudaSynchronizeDevice(int ordinal);

// Opens a peer process's cudaIpcMemHandle_t (64 bytes) on device `ordinal`; the pointer stays
// valid until CudaCloseIpcHandle. The same handle must not be opened twice in one process.
absl::StatusOr<uint8_t*> CudaOpenIpcHandle(const std::string& handle, int ordinal);
absl::Status CudaCloseIpcHandle(uint8_t* pointer, int ordinal);

// Page-locks [data, data + bytes) of an existing mapping for every device (portable), so copies
// from it are DMA and may be asynchronous. `read_only`: the mapping has no write permission.
absl::Status CudaHostRegister(void* data, uint64_t bytes, bool read_only);
absl::Status CudaHostUnregister(void* data);

}  // namespace tensorbroker

#endif  // TENSORBROKER_COMMON_CUDA_RUNTIME_H_
