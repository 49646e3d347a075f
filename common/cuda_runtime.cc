#include "common/cuda_runtime.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/cuda_devices.h"
#include "common/strided_copy.h"

#ifdef TENSORBROKER_HAVE_CUDA
#include "common/cuda_driver.h"
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

}  // namespace

absl::Status CopyToCompactOnDevice(const DLTensor& src, void* dst, DLDevice dst_device) {
  if (IsHost(src.device) && IsHost(dst_device)) {
    CopyToCompact(src, static_cast<uint8_t*>(dst));
    return absl::OkStatus();
  }
  if (absl::Status s = CudaUsable(); !s.ok()) return s;
  const int ordinal =
      dst_device.device_type == kDLCUDA ? dst_device.device_id : src.device.device_id;
  ScopedCudaDevice device(ordinal);
  if (absl::Status s = device.status(); !s.ok()) return s;
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
  if (error != cudaSuccess) return CudaRuntimeFailed("cudaMemcpy (strided copy)", error);
  if (cudaError_t e = cudaStreamSynchronize(nullptr); e != cudaSuccess) {
    return CudaRuntimeFailed("cudaStreamSynchronize after the copy", e);
  }
  return absl::OkStatus();
}

absl::Status CudaCopy(void* dst, const void* src, uint64_t bytes, int ordinal) {
  if (absl::Status s = CudaUsable(); !s.ok()) return s;
  ScopedCudaDevice device(ordinal);
  if (absl::Status s = device.status(); !s.ok()) return s;
  if (cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, nullptr);
      e != cudaSuccess) {
    return CudaRuntimeFailed("cudaMemcpy", e);
  }
  if (cudaError_t e = cudaStreamSynchronize(nullptr); e != cudaSuccess) {
    return CudaRuntimeFailed("cudaStreamSynchronize after cudaMemcpy", e);
  }
  return absl::OkStatus();
}

absl::Status CudaSynchronizeStream(uintptr_t stream, int ordinal) {
  if (absl::Status s = CudaUsable(); !s.ok()) return s;
  ScopedCudaDevice device(ordinal);
  if (absl::Status s = device.status(); !s.ok()) return s;
  if (cudaError_t e = cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream));
      e != cudaSuccess) {
    return CudaRuntimeFailed(
        absl::StrCat("cudaStreamSynchronize(stream 0x", absl::Hex(stream), ")"), e);
  }
  return absl::OkStatus();
}

absl::Status CudaSynchronizeDevice(int ordinal) {
  if (absl::Status s = CudaUsable(); !s.ok()) return s;
  ScopedCudaDevice device(ordinal);
  if (absl::Status s = device.status(); !s.ok()) return s;
  if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) {
    return CudaRuntimeFailed(absl::StrCat("cudaDeviceSynchronize (device ", ordinal, ")"), e);
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
  ScopedCudaDevice device(ordinal);
  if (absl::Status s = device.status(); !s.ok()) return s;
  void* pointer = nullptr;
  if (cudaError_t e = cudaIpcOpenMemHandle(&pointer, ipc, cudaIpcMemLazyEnablePeerAccess);
      e != cudaSuccess) {
    return CudaRuntimeFailed(absl::StrCat("cudaIpcOpenMemHandle on device ", ordinal), e);
  }
  return static_cast<uint8_t*>(pointer);
}

absl::Status CudaCloseIpcHandle(uint8_t* pointer, int ordinal) {
  ScopedCudaDevice device(ordinal);
  if (absl::Status s = device.status(); !s.ok()) return s;
  if (cudaError_t e = cudaIpcCloseMemHandle(pointer); e != cudaSuccess) {
    return CudaRuntimeFailed(absl::StrCat("cudaIpcCloseMemHandle on device ", ordinal), e);
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
    return CudaRuntimeFailed(
        absl::StrCat("cudaHostRegister(", bytes, " bytes", read_only ? ", read-only" : "",
                     "); page-locking needs free physical memory and may be limited by "
                     "the locked-memory limit (see docs/architecture.md, "
                     "\"CUDA tensors\")"),
        e);
  }
  return absl::OkStatus();
}

absl::Status CudaHostUnregister(void* data) {
  if (cudaError_t e = cudaHostUnregister(data); e != cudaSuccess) {
    return CudaRuntimeFailed("cudaHostUnregister", e);
  }
  return absl::OkStatus();
}

#endif  // TENSORBROKER_HAVE_CUDA

}  // namespace tensorbroker
