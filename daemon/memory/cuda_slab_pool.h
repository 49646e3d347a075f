// CUDA tensors on one device, in slabs (cuda_slab.h): small tensors share pooled slabs and are
// sub-allocated 256-byte aligned; a tensor above the dedicated threshold gets a slab of its own.
// Each slab's IPC handle is computed once, when the slab is made, and travels in every Block.
//
// Capacity counts slab bytes. A slab is freed as soon as it holds no block: the store frees a
// block only when no lease on it remains, so no consumer can still have the slab open then.
// Device memory has no read-only mapping; BlockKind does not separate slabs.
// Slab names are "<prefix>cuda<ordinal>-<seq>", unique for the life of the daemon.
// Not thread-safe: the TensorStore calls it only while holding its own lock.
#ifndef TENSORBROKER_DAEMON_CUDA_SLAB_POOL_H_
#define TENSORBROKER_DAEMON_CUDA_SLAB_POOL_H_

#include <map>
#include <memory>
#include <string>

#include "daemon/memory/cuda_slab.h"
#include "daemon/memory/memory_pool.h"
#include "daemon/memory/offset_allocator.h"

namespace tensorbroker::daemon {

struct CudaSlabPoolOptions {
  int ordinal = 0;
  uint64_t capacity_bytes = 0;
  std::string name_prefix;
  uint64_t pooled_slab_bytes = 64ull << 20;    // size of a shared slab
  uint64_t dedicated_threshold = 16ull << 20;  // larger tensors get their own slab
};

class CudaSlabPool final : public MemoryPool {
 public:
  explicit CudaSlabPool(CudaSlabPoolOptions options);

  DLDevice device() const override { return {kDLCUDA, options_.ordinal}; }
  absl::StatusOr<Block> Allocate(uint64_t nbytes, BlockKind kind, const std::string& sharing_key,
                                 std::vector<std::string>* removed_segments) override;
  void Free(const Block& block, std::vector<std::string>* removed_segments) override;
  PoolStats Stats() const override;

 private:
  struct Slab {
    std::unique_ptr<CudaSlab> memory;
    OffsetAllocator allocator;
    bool dedicated;
  };

  using SlabMap = std::map<std::string, Slab>;  // by name

  // Reserves a slab of `bytes` (rounded up to 2 MiB) within the capacity.
  absl::StatusOr<SlabMap::iterator> NewSlab(uint64_t bytes, bool dedicated);
  Block MakeBlock(const std::string& name, const Slab& slab, uint64_t offset) const;

  CudaSlabPoolOptions options_;
  uint64_t next_sequence_ = 0;
  uint64_t reserved_bytes_ = 0;
  uint64_t used_bytes_ = 0;
  SlabMap slabs_;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_CUDA_SLAB_POOL_H_
