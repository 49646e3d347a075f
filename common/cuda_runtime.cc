#include "common/cuda_runtime.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/cuda_devices.h"
#include "common/strided_copy.h"

#ifdef TENSORBROKER_HAVE_CUDA
#include <cuda.h>  // types only: driver calls go through cudaGetDriverEntryPointByVersion
#include <cuda_runtime_api.h>
#endif

namespace tensorbroker {

absl::Status CudaUsable() {
  auto devices = CudaDevices();
  return devices.ok() ? absl::OkStatus() : devices.status();
}

#ifndef TENSORBROKER_HAVE_CUDA

absl::Status CopyToCompactOnDevice(const DLTensor& src, void* dst, DLDevice dst_device) {
  const auto host = [](DLDevice d) {
    return d.device_type == kDLCPU || d.device_type == kDLCUDAHost;
  };
  if (host(src.device) && host(dst_device)) {
    CopyToCompact(src, static_cast<uint8_t*>(dst));
    return absl::OkStatus();
  }
  return CudaUsable();
}
absl::Status CudaCopy(void*, const void*, uint64_t, int) { return CudaUsable(); }
absl::Status CudaSynchronizeStream(uintptr_t, int) { return CudaUsable(); }
absl::Status CudaSynchronizeDevice(int) { return CudaUsable(); }
absl::StatusOr<uint8_t*> CudaOpenIpcHandle(const std::string&, int) { return CudaUsable(); }
absl::Status CudaCloseIpcHandle(uint8_t*, int) { return CudaUsable(); }
absl::Status CudaHostRegister(void*, uint64_t, bool) { return CudaUsable(); }
absl::Status CudaHostUnregister(void*) { return CudaUsable(); }

#else  // TENSORBROKER_HAVE_CUDA

namespace {

bool IsHost(DLDevice device) {
  return device.device_type == kDLCPU || device.device_type == kDLCUDAHost;
}

absl::Status Failed(const std::string& call, cudaError_t error) {
  (void)cudaGetLastError();  // leave no non-sticky error behind for the next call
  const std::string message =
      absl::StrCat(call, ": ", cudaGetErrorName(error), " (", cudaGetErrorString(error), ")");
  switch (error) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(message);
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidPitchValue:
    case cudaErrorInvalidDevice:
      return absl::InvalidArgumentError(message);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorNotSupported:
    case cudaErrorHostMemoryAlreadyRegistered:
      return absl::FailedPreconditionError(message);
    default:
      return absl::InternalError(message);
  }
}

// The driver's current-context calls, reached through the runtime (no link against libcuda, so
// binaries still start on machines without the driver). Null where the driver lacks them.
struct DriverContextCalls {
  CUresult (*get)(CUcontext*) = nullptr;
  CUresult (*set)(CUcontext) = nullptr;
};

const DriverContextCalls& ContextCalls() {
  static const DriverContextCalls calls = [] {
    DriverContextCalls found;
    void* get = nullptr;
    void* set = nullptr;
    cudaDriverEntryPointQueryResult result{};
    if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &get, 12000, cudaEnableDefault,
                                         &result) == cudaSuccess &&
        result == cudaDriverEntryPointSuccess &&
        cudaGetDriverEntryPointByVersion("cuCtxSetCurrent", &set, 12000, cudaEnableDefault,
                                         &result) == cudaSuccess &&
        result == cudaDriverEntryPointSuccess) {
      found.get = reinterpret_cast<CUresult (*)(CUcontext*)>(get);
      found.set = reinterpret_cast<CUresult (*)(CUcontext)>(set);
    }
    (void)cudaGetLastError();
    return found;
  }();
  return calls;
}

// Makes `ordinal` the calling thread's current device until destroyed, then puts back exactly
// the context the thread had, none included. (Restoring with cudaSetDevice(previous) would
// create a context on device 0 for every thread that had none: hundreds of MiB on a GPU the
// process may never use.)
class ScopedDevice {
 public:
  explicit ScopedDevice(int ordinal) {
    const DriverContextCalls& calls = ContextCalls();
    if (calls.get != nullptr && calls.get(&saved_context_) == CUDA_SUCCESS) {
      know_context_ = true;
    }
    int current = -1;
    const bool has_context = !know_context_ || saved_context_ != nullptr;
    if (has_context && cudaGetDevice(&current) == cudaSuccess && current == ordinal) return;
    previous_ = current;
    status_ = cudaSetDevice(ordinal);
    changed_ = status_ == cudaSuccess;
  }
  ~ScopedDevice() {
    if (!changed_) return;
    if (know_context_) {
      ContextCalls().set(saved_context_);
    } else if (previous_ >= 0) {
      cudaSetDevice(previous_);
    }
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

  absl::Status status(int ordinal) const {
    if (status_ == cudaSuccess) return absl::OkStatus();
    return Failed(absl::StrCat("cudaSetDevice(", ordinal, ")"), status_);
  }

 private:
  CUcontext saved_context_ = nullptr;
  bool know_context_ = false;
  int previous_ = -1;
  bool changed_ = false;
  cudaError_t status_ = cudaSuccess;
};

}  // namespace

absl::Status CopyToCompactOnDevice(const DLTensor& src, void* dst, DLDevice dst_device) {
  if (IsHost(src.device) && IsHost(dst_device)) {
    CopyToCompact(src, static_cast<uint8_t*>(dst));
    return absl::OkStatus();
  }
  if (absl::Status s = CudaUsable(); !s.ok()) return s;
  const int ordinal =
      dst_device.device_type == kDLCUDA ? dst_device.device_id : src.device.device_id;
  ScopedDevice device(ordinal);
  if (absl::Status s = device.status(ordinal); !s.ok()) return s;
  const uint8_t* base = static_cast<const uint8_t*>(src.data) + src.byte_offset;
  uint8_t* out = static_cast<uint8_t*>(dst);
  cudaError_t error = cudaSuccess;
  ForEachRowBatch(src, [&](int64_t offset, int64_t run_bytes, int64_t rows, int64_t pitch) {
    if (error != cudaSuccess) return;
    const size_t width = static_cast<size_t>(run_bytes);
    if (rows > 1 && pitch >= run_bytes) {
      // A whole batch in one 2-D copy: rows of `width` bytes, `pitch` apart in the source.
      error = cudaMemcpy2DAsync(out, width, base + offset, static_cast<size_t>(pitch), width,
                                static_cast<size_t>(rows), cudaMemcpyDefault, nullptr);
      if (error != cudaErrorInvalidPitchValue && error != cudaErrorInvalidValue) {
        out += width * static_cast<size_t>(rows);
        return;
      }
      // A pitch above the device's limit (reported either way): row by row below, where a
      // real invalid value fails again and is reported.
      (void)cudaGetLastError();
      error = cudaSuccess;
    }
    for (int64_t r = 0; r < rows && error == cudaSuccess; ++r) {
      error = cudaMemcpyAsync(out, base + offset + r * pitch, width, cudaMemcpyDefault, nullptr);
      out += width;
    }
  });
  if (error != cudaSuccess) return Failed("cudaMemcpy (strided copy)", error);
  if (cudaError_t e = cudaStreamSynchronize(nullptr); e != cudaSuccess) {
    return Failed("cudaStreamSynchronize after the copy", e);
  }
  return absl::OkStatus();
}

absl::Status CudaCopy(void* dst, const void* src, uint64_t bytes, int ordinal) {
  if (absl::Status s = CudaUsable(); !s.ok()) return s;
  ScopedDevice device(ordinal);
  if (absl::Status s = device.status(ordinal); !s.ok()) return s;
  if (cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, nullptr);
      e != cudaSuccess) {
    return Failed("cudaMemcpy", e);
  }
  if (cudaError_t e = cudaStreamSynchronize(nullptr); e != cudaSuccess) {
    return Failed("cudaStreamSynchronize after cudaMemcpy", e);
  }
  return absl::OkStatus();
}

absl::Status CudaSynchronizeStream(uintptr_t stream, int ordinal) {
  if (absl::Status s = CudaUsable(); !s.ok()) return s;
  ScopedDevice device(ordinal);
  if (absl::Status s = device.status(ordinal); !s.ok()) return s;
  if (cudaError_t e = cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream));
      e != cudaSuccess) {
    return Failed(absl::StrCat("cudaStreamSynchronize(stream 0x", absl::Hex(stream), ")"), e);
  }
  return absl::OkStatus();
}

absl::Status CudaSynchronizeDevice(int ordinal) {
  if (absl::Status s = CudaUsable(); !s.ok()) return s;
  ScopedDevice device(ordinal);
  if (absl::Status s = device.status(ordinal); !s.ok()) return s;
  if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) {
    return Failed(absl::StrCat("cudaDeviceSynchronize (device ", ordinal, ")"), e);
  }
  return absl::OkStatus();
}

absl::StatusOr<uint8_t*> CudaOpenIpcHandle(const std::string& handle, int ordinal) {
  if (absl::Status s = CudaUsable(); !s.ok()) return s;
  cudaIpcMemHandle_t ipc{};
  if (handle.size() != sizeof(ipc)) {
    return absl::DataLossError(
        absl::StrCat("CUDA IPC handle has ", handle.size(), " bytes, expected ", sizeof(ipc)));
  }
  std::memcpy(&ipc, handle.data(), sizeof(ipc));
  ScopedDevice device(ordinal);
  if (absl::Status s = device.status(ordinal); !s.ok()) return s;
  void* pointer = nullptr;
  if (cudaError_t e = cudaIpcOpenMemHandle(&pointer, ipc, cudaIpcMemLazyEnablePeerAccess);
      e != cudaSuccess) {
    return Failed(absl::StrCat("cudaIpcOpenMemHandle on device ", ordinal), e);
  }
  return static_cast<uint8_t*>(pointer);
}

absl::Status CudaCloseIpcHandle(uint8_t* pointer, int ordinal) {
  ScopedDevice device(ordinal);
  if (absl::Status s = device.status(ordinal); !s.ok()) return s;
  if (cudaError_t e = cudaIpcCloseMemHandle(pointer); e != cudaSuccess) {
    return Failed(absl::StrCat("cudaIpcCloseMemHandle on device ", ordinal), e);
  }
  return absl::OkStatus();
}

absl::Status CudaHostRegister(void* data, uint64_t bytes, bool read_only) {
  if (absl::Status s = CudaUsable(); !s.ok()) return s;
  const unsigned int flags = cudaHostRegisterPortable | (read_only ? cudaHostRegisterReadOnly : 0u);
  cudaError_t e = cudaHostRegister(data, bytes, flags);
  if (e != cudaSuccess && read_only) {
    // Devices without cudaDevAttrHostRegisterReadOnlySupported refuse the flag; the driver may
    // still pin a read-only mapping without it.
    (void)cudaGetLastError();
    if (cudaHostRegister(data, bytes, cudaHostRegisterPortable) == cudaSuccess) {
      return absl::OkStatus();
    }
  }
  if (e != cudaSuccess) {
    return Failed(absl::StrCat("cudaHostRegister(", bytes, " bytes", read_only ? ", read-only" : "",
                               "); page-locking needs free physical memory and may be limited by "
                               "the locked-memory limit (see docs/architecture.md, "
                               "\"CUDA tensors\")"),
                  e);
  }
  return absl::OkStatus();
}

absl::Status CudaHostUnregister(void* data) {
  if (cudaError_t e = cudaHostUnregister(data); e != cudaSuccess) {
    return Failed("cudaHostUnregister", e);
  }
  return absl::OkStatus();
}

#endif  // TENSORBROKER_HAVE_CUDA

}  // namespace tensorbroker
