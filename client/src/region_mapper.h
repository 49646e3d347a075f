// The client's device seam: turns a MemoryRegion from the daemon into bytes addressable in this
// process, plus whatever keeps them addressable. CPU regions are shared-memory segments mapped
// through the process-wide SegmentMapper; other devices (CUDA IPC) plug in here.
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
  uint8_t* data = nullptr;                // the region's first byte
  DLDevice device{kDLCPU, 0};             // as the consumer sees it
};

// Checks the region (untrusted: it came over a socket) and maps it.
absl::StatusOr<LocalRegion> MapRegion(Connection& connection, const v1::MemoryRegion& region);

}  // namespace tensorbroker::client_internal

#endif  // TENSORBROKER_CLIENT_SRC_REGION_MAPPER_H_
