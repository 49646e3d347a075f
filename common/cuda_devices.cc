#include "common/cuda_devices.h"

#include <cstdio>

#include "absl/strings/str_cat.h"

#ifdef TENSORBROKER_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace tensorbroker {
namespace {

absl::StatusOr<std::vector<CudaDevice>> ProbeDevices() {
#ifndef TENSORBROKER_HAVE_CUDA
  return absl::FailedPreconditionError(
      "this build has no CUDA support (configure with the CUDA toolkit and TENSORBROKER_CUDA)");
#else
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    return absl::FailedPreconditionError(
        absl::StrCat("no usable GPU: cudaGetDeviceCount: ", cudaGetErrorName(e), " (",
                     cudaGetErrorString(e), ")"));
  }
  if (count == 0) return absl::FailedPreconditionError("no usable GPU: no CUDA device found");
  std::vector<CudaDevice> devices;
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    cudaDeviceProp properties{};
    if (cudaError_t e = cudaGetDeviceProperties(&properties, ordinal); e != cudaSuccess) {
      return absl::FailedPreconditionError(absl::StrCat(
          "CUDA device ", ordinal, ": cudaGetDeviceProperties: ", cudaGetErrorString(e)));
    }
    CudaDevice device;
    device.ordinal = ordinal;
    for (size_t i = 0; i < device.uuid.size(); ++i) {
      device.uuid[i] = static_cast<uint8_t>(properties.uuid.bytes[i]);
    }
    device.name = properties.name;
    device.total_bytes = properties.totalGlobalMem;
    devices.push_back(std::move(device));
  }
  return devices;
#endif
}

}  // namespace

bool BuiltWithCuda() {
#ifdef TENSORBROKER_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

absl::StatusOr<std::vector<CudaDevice>> CudaDevices() {
  static const auto* const devices = new absl::StatusOr<std::vector<CudaDevice>>(ProbeDevices());
  return *devices;
}

absl::StatusOr<int> CudaOrdinalOf(const CudaUuid& uuid) {
  auto devices = CudaDevices();
  if (!devices.ok()) return devices.status();
  for (const CudaDevice& device : *devices) {
    if (device.uuid == uuid) return device.ordinal;
  }
  return absl::NotFoundError(absl::StrCat("CUDA device ", CudaUuidText(uuid),
                                          " is not visible in this process "
                                          "(check CUDA_VISIBLE_DEVICES)"));
}

std::string CudaUuidText(const CudaUuid& uuid) {
  char text[64];
  std::snprintf(text, sizeof(text),
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", uuid[0],
                uuid[1], uuid[2], uuid[3], uuid[4], uuid[5], uuid[6], uuid[7], uuid[8], uuid[9],
                uuid[10], uuid[11], uuid[12], uuid[13], uuid[14], uuid[15]);
  return text;
}

}  // namespace tensorbroker
