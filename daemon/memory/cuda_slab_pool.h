// CUDA tensors on one device, in slabs (cuda_slab.h): small tensors share pooled slabs and are
// sub-allocated 256-byte aligned; a tensor above the dedicated threshold gets a slab of its own.
// Each slab is exported once, when it is made: a VMM slab's descriptor goes in every Block as
// both of its descriptors (a consumer maps it read-only or read-write as the grant says), a
// legacy slab's IPC handle in `export_handle`.
//
// Capacity counts slab bytes. A slab is freed as soon as it holds no block: the store frees a
// block only when no lease on it remains, so no consumer can still have the slab open then.
// VMM slabs keep blocks apart as CPU segments do (memory_pool.h): immutable blocks share a slab
// only with blocks of the same sharing key, and each mutable block has a slab of its own, so a
// descriptor reaches only what its holder may read (or write). Legacy slabs are pooled across
// keys, as before: a legacy handle is a bearer token for the whole slab anyway.
//
// VMM slabs outlive the daemon when their descriptors are kept elsewhere: the journal is told of
// each (CudaSlabCreated/Removed), and a new instance adopts them (AdoptSegment, AdoptBlock,
// RemoveUnclaimed, as CpuSegmentPool does), keeping new blocks out of adopted slabs until
// EndAdoptionGrace. Legacy slabs die with the daemon.
// Slab names are "<prefix>cuda<ordinal>-<seq>", unique for the life of the daemon.
// Not thread-safe: the TensorStore calls it only while holding its own lock.
#ifndef TENSORBROKER_DAEMON_CUDA_SLAB_POOL_H_
#define TENSORBROKER_DAEMON_CUDA_SLAB_POOL_H_

#include <map>
#include <memory>
#include <string>

#include "daemon/base/persistence_journal.h"
#include "daemon/memory/adopted_claim.h"
#include "daemon/memory/cuda_slab.h"
#include "daemon/memory/memory_pool.h"
#include "daemon/memory/offset_allocator.h"

namespace tensorbroker::daemon {

struct CudaSlabPoolOptions {
  int ordinal = 0;
  CudaHandles handles = CudaHandles::kLegacyIpc;
  uint64_t granularity = LegacyCudaSlab::kGranularity;  // VMM: the device's (CudaVmmSupport)
  uint64_t capacity_bytes = 0;
  std::string name_prefix;
  uint64_t pooled_slab_bytes = 64ull << 20;    // size of a shared slab
  uint64_t dedicated_threshold = 16ull << 20;  // larger tensors get their own slab
  // Told of each VMM slab created and removed (not of those dropped at destruction); may be
  // null. Must outlive the pool.
  PersistenceJournal* journal = nullptr;
};

class CudaSlabPool final : public MemoryPool {
 public:
  explicit CudaSlabPool(CudaSlabPoolOptions options);

  DLDevice device() const override { return {kDLCUDA, options_.ordinal}; }
  absl::StatusOr<Block> Allocate(uint64_t nbytes, BlockKind kind, const std::string& sharing_key,
                                 std::vector<std::string>* removed_segments) override;
  void Free(const Block& block, std::vector<std::string>* removed_segments) override;
  PoolStats Stats() const override;
  void EndAdoptionGrace() override;
  void ReplaySegments(PersistenceJournal* journal) const override;

  // Adoption (VMM pools only; FAILED_PRECONDITION for a legacy one): the slab a previous
  // instance exported as `fd`, `size` bytes, imported and mapped again under its name.
  absl::Status AdoptSegment(const std::string& name, UniqueFd fd, uint64_t size) override;
  absl::StatusOr<Block> AdoptBlock(const std::string& slab, uint64_t offset, uint64_t size,
                                   BlockKind kind, const std::string& sharing_key) override;
  void RemoveUnclaimed(std::vector<std::string>* removed_segments) override;

 private:
  struct Slab {
    std::unique_ptr<CudaSlab> memory;
    OffsetAllocator allocator;
    bool dedicated;
    std::string sharing_key;  // VMM: the key of every block in it; legacy: empty
    bool adopted = false;     // from a previous instance, until EndAdoptionGrace
    AdoptedClaim claim;       // adopted slabs: what AdoptBlock put in it so far
  };

  using SlabMap = std::map<std::string, Slab>;  // by name

  // Whether blocks of `kind` and `nbytes` (rounded) get a slab of their own.
  bool Dedicated(uint64_t rounded, BlockKind kind) const;
  // Reserves a slab of `bytes` (rounded up to the granularity) within the capacity.
  absl::StatusOr<SlabMap::iterator> NewSlab(uint64_t bytes, bool dedicated,
                                            std::string sharing_key);
  SlabMap::iterator AddSlab(std::string name, std::unique_ptr<CudaSlab> memory, bool dedicated,
                            std::string sharing_key);
  void RemoveSlab(SlabMap::iterator it, std::vector<std::string>* removed_segments);
  Block MakeBlock(const std::string& name, const Slab& slab, uint64_t offset) const;

  CudaSlabPoolOptions options_;
  uint64_t next_sequence_ = 0;
  uint64_t reserved_bytes_ = 0;
  uint64_t used_bytes_ = 0;
  SlabMap slabs_;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_CUDA_SLAB_POOL_H_
