// The client's device seam: turns a MemoryRegion from the daemon into bytes addressable in this
// process, plus whatever keeps them addressable. CPU regions are segments mapped through the
// process-wide SegmentMapper from the descriptors the daemon sent (fetched again over the local
// channel if this process has none), page-locked for CUDA when asked (kDLCUDAHost); CUDA
// regions are slabs mapped through the process-wide CudaVmmMapper (a VMM slab's descriptor, from
// the local channel) or opened through the CudaSlabMapper (a legacy IPC handle), on the local
// ordinal of the GPU the region's UUID names.
// Thread-safe.
#ifndef TENSORBROKER_CLIENT_SRC_REGION_MAPPER_H_
#define TENSORBROKER_CLIENT_SRC_REGION_MAPPER_H_

#include <dlpack/dlpack.h>

#include <memory>

#include "absl/status/statusor.h"
#include "client/src/connection.h"
#include "tensorbroker/v1/broker.pb.h"

namespace tensorbroker::client_internal {

struct LocalRegion {
  std::shared_ptr<const void> keepalive;  // the mapping; the bytes stay valid while held
  uint8_t* data = nullptr;                // the region's first byte (CUDA: a device pointer)
  DLDevice device{kDLCPU, 0};             // as the consumer sees it
};

// Checks the grant's region (untrusted: it came over a socket) and maps it. `pinned` asks for a
// CPU region page-locked (device kDLCUDAHost); INVALID_ARGUMENT for a CUDA region.
absl::StatusOr<LocalRegion> MapRegion(Connection& connection, const v1::TensorGrant& grant,
                                      bool pinned);

}  // namespace tensorbroker::client_internal

#endif  // TENSORBROKER_CLIENT_SRC_REGION_MAPPER_H_
