// This process's mappings of the daemons' CUDA VMM slabs, shared by every Client in the process
// (ProcessCudaVmmMapper). A slab reaches a process only as a descriptor the daemon sends on the
// local channel (SegmentDescriptor with device_type kDLCUDA); the mapper keeps the descriptor,
// and on first use per access mode imports it, reserves an address range, maps the allocation
// and sets the access: read-only for readers of sealed tensors, read-write for the creator of a
// pending tensor and holders of mutable ones. A device that refuses read-only mappings gets a
// read-write one (the DLPack tensor stays flagged read-only), and the mapper says which devices
// did what (read_only_devices).
//
// As for CPU segments (segment_mapper.h), a mapping lives while the cache or any tensor holds
// it: the cache lets go when the daemon says the slab is gone (Forget), tensors when their
// deleter runs, so a freed slab's device memory is not kept by an idle mapping.
//
// Thread-safe.
#ifndef TENSORBROKER_CLIENT_SRC_CUDA_VMM_MAPPER_H_
#define TENSORBROKER_CLIENT_SRC_CUDA_VMM_MAPPER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/cuda_vmm.h"
#include "common/mutex.h"
#include "common/unique_fd.h"

namespace tensorbroker::client_internal {

class CudaVmmMapper {
 public:
  // Keeps the descriptor of slab `name`, `size` bytes (one already kept wins; `fd` is closed).
  void Adopt(const std::string& name, UniqueFd fd, uint64_t size);
  // The mapping of slab `name` on device `ordinal` for `access` (a read-only request may come
  // back read-write, see above). NOT_FOUND when this process has no descriptor of it: fetch it
  // and ask again.
  absl::StatusOr<std::shared_ptr<const CudaMapping>> Map(const std::string& name, int ordinal,
                                                         CudaAccess access);
  // Drops the cache's descriptor and mappings of `name` (tensors using it keep their mapping).
  void Forget(const std::string& name);
  // Slabs whose descriptor or a mapping the cache holds.
  size_t cached() const;
  // Whether device `ordinal` has mapped a slab read-only (1), refused to (0), or not been asked
  // yet (-1).
  int read_only_on(int ordinal) const;

 private:
  friend CudaVmmMapper& ProcessCudaVmmMapper();
  CudaVmmMapper() = default;
  struct Entry {
    UniqueFd fd;
    uint64_t size = 0;
    std::shared_ptr<const CudaMapping> read_only;  // may be read-write, see above
    std::shared_ptr<const CudaMapping> read_write;
  };
  absl::StatusOr<std::shared_ptr<const CudaMapping>> MapLocked(Entry& entry, int ordinal,
                                                               CudaAccess access)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable Mutex mu_;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::map<int, bool> read_only_by_device_ ABSL_GUARDED_BY(mu_);
};

// The one mapper of this process; never destroyed.
CudaVmmMapper& ProcessCudaVmmMapper();

}  // namespace tensorbroker::client_internal

#endif  // TENSORBROKER_CLIENT_SRC_CUDA_VMM_MAPPER_H_
