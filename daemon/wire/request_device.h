// Turns the Device of a Create or Put request (untrusted) into the device the daemon allocates
// on. CPU: type kDLCPU, id 0 (or no device at all). CUDA: the GPU named by `uuid` (16 bytes), or
// by the daemon's own ordinal when uuid is empty. Pinned host memory (kDLCUDAHost) is a client
// side choice, not a place the daemon allocates.
//
// Errors name the field: INVALID_ARGUMENT for malformed values, FAILED_PRECONDITION when CUDA is
// asked of a daemon without a usable GPU (with the reason) or for a GPU it does not see.
// Thread-safe.
#ifndef TENSORBROKER_DAEMON_REQUEST_DEVICE_H_
#define TENSORBROKER_DAEMON_REQUEST_DEVICE_H_

#include <dlpack/dlpack.h>

#include "absl/status/statusor.h"
#include "tensorbroker/v1/broker.pb.h"

namespace tensorbroker::daemon {

absl::StatusOr<DLDevice> ResolveRequestDevice(bool has_device, const v1::Device& device);

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_REQUEST_DEVICE_H_
