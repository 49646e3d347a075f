// This process's openings of the daemons' CUDA slabs (CUDA IPC handles), shared by every Client
// in the process. A slab is opened once (cudaIpcOpenMemHandle takes a millisecond or more) and
// shared by every tensor in it; it is closed (cudaIpcCloseMemHandle) as soon as the last tensor
// from it is released, so the daemon may free it once its leases are gone.
//
// Opening and closing happen under one lock, and a handle is opened at most once per process: a
// slab asked for again while its last holder is being released keeps its open handle. Thread-safe;
// tensors may be released on any thread.
#ifndef TENSORBROKER_CLIENT_SRC_CUDA_SLAB_MAPPER_H_
#define TENSORBROKER_CLIENT_SRC_CUDA_SLAB_MAPPER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/mutex.h"

namespace tensorbroker::client_internal {

// One open slab: the local device pointer of its first byte on `ordinal`.
struct OpenedSlab {
  uint8_t* data = nullptr;
  int ordinal = 0;
  uint64_t size = 0;
};

class CudaSlabMapper {
 public:
  // The open slab `name` (opening `ipc_handle` on device `ordinal` if no tensor holds it now).
  absl::StatusOr<std::shared_ptr<const OpenedSlab>> Open(const std::string& name,
                                                         const std::string& ipc_handle, int ordinal,
                                                         uint64_t size);
  // Slabs open now.
  size_t open() const;

 private:
  friend CudaSlabMapper& ProcessCudaSlabMapper();
  CudaSlabMapper() = default;
  struct Entry {
    std::weak_ptr<const OpenedSlab> current;  // what Open hands out
    OpenedSlab slab;
    int groups = 0;  // shared_ptr groups over this handle whose deleter has not run yet
  };
  std::shared_ptr<const OpenedSlab> NewGroupLocked(const std::string& name, Entry* entry);
  // A group's deleter: closes the handle with the last group.
  void Release(const std::string& name, const OpenedSlab* group);

  mutable Mutex mu_;
  std::map<std::string, Entry> open_;
};

// The one mapper of this process; never destroyed.
CudaSlabMapper& ProcessCudaSlabMapper();

}  // namespace tensorbroker::client_internal

#endif  // TENSORBROKER_CLIENT_SRC_CUDA_SLAB_MAPPER_H_
