#include "daemon/wire/request_device.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/cuda_devices.h"

namespace tensorbroker::daemon {
namespace {

absl::StatusOr<DLDevice> ResolveCuda(const v1::Device& device) {
  // Malformed before unservable: the same request is wrong on every machine.
  if (!device.uuid().empty() && device.uuid().size() != sizeof(CudaUuid)) {
    return absl::InvalidArgumentError(
        absl::StrCat("device.uuid has ", device.uuid().size(), " bytes; a CUDA UUID has 16"));
  }
  if (device.device_id() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("device.device_id ", device.device_id(), " is negative"));
  }
  auto gpus = CudaDevices();
  if (!gpus.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("device cuda:", device.device_id(),
                     ": this tensorbrokerd serves CPU memory only: ", gpus.status().message()));
  }
  if (!device.uuid().empty()) {
    CudaUuid uuid;
    std::copy(device.uuid().begin(), device.uuid().end(), uuid.begin());
    auto ordinal = CudaOrdinalOf(uuid);
    if (!ordinal.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("device.uuid ", CudaUuidText(uuid),
                       " is not a GPU tensorbrokerd can see (check its CUDA_VISIBLE_DEVICES)"));
    }
    return DLDevice{kDLCUDA, *ordinal};
  }
  if (static_cast<size_t>(device.device_id()) >= gpus->size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device.device_id ", device.device_id(), ": tensorbrokerd has ", gpus->size(), " GPU(s)"));
  }
  return DLDevice{kDLCUDA, device.device_id()};
}

}  // namespace

absl::StatusOr<DLDevice> ResolveRequestDevice(bool has_device, const v1::Device& device) {
  if (!has_device) return DLDevice{kDLCPU, 0};
  switch (device.device_type()) {
    case kDLCPU:
      if (device.device_id() != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("device.device_id ", device.device_id(), ": the CPU device is 0"));
      }
      return DLDevice{kDLCPU, 0};
    case kDLCUDA:
      return ResolveCuda(device);
    case kDLCUDAHost:
      return absl::InvalidArgumentError(
          "device.device_type 3 (kDLCUDAHost): pinned host memory is chosen by the client "
          "when it maps a CPU tensor (the pinned option of Create and Get); ask for CPU");
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("device.device_type ", device.device_type(),
                       " is not a device the broker serves (1 = CPU, 2 = CUDA)"));
  }
}

}  // namespace tensorbroker::daemon
