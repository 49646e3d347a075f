// The CUDA devices this process can use, found once, and why there are none when there are none.
// Devices are named across processes by UUID: a consumer with another CUDA_VISIBLE_DEVICES maps
// the UUID to its own ordinal.
//
// Thread-safe: the probe runs once (first call); later calls return the same answer.
#ifndef TENSORBROKER_COMMON_CUDA_DEVICES_H_
#define TENSORBROKER_COMMON_CUDA_DEVICES_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tensorbroker {

using CudaUuid = std::array<uint8_t, 16>;

struct CudaDevice {
  int ordinal = 0;  // in this process (after CUDA_VISIBLE_DEVICES)
  CudaUuid uuid{};
  std::string name;
  uint64_t total_bytes = 0;
};

// True when this build has CUDA support (TENSORBROKER_CUDA), whatever the machine has.
bool BuiltWithCuda();

// The usable devices; FAILED_PRECONDITION saying why when there is none: the build has no CUDA
// support, or the driver or runtime answered with an error (its text), or no device exists.
absl::StatusOr<std::vector<CudaDevice>> CudaDevices();

// The ordinal in this process of the device with `uuid`; NOT_FOUND when it is not visible here.
absl::StatusOr<int> CudaOrdinalOf(const CudaUuid& uuid);

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi prints it.
std::string CudaUuidText(const CudaUuid& uuid);

}  // namespace tensorbroker

#endif  // TENSORBROKER_COMMON_CUDA_DEVICES_H_
