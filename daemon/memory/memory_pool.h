// The daemon's device abstraction: a MemoryPool hands out Blocks of one device's memory and
// takes them back. CPU shared memory is CpuSegmentPool (cpu_segment_pool.h); CUDA device memory
// is CudaSlabPool (cuda_slab_pool.h), one per device.
//
// Not thread-safe: the TensorStore calls a pool only while holding its own lock.
#ifndef TENSORBROKER_DAEMON_MEMORY_POOL_H_
#define TENSORBROKER_DAEMON_MEMORY_POOL_H_

#include <dlpack/dlpack.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/unique_fd.h"
#include "daemon/base/persistence_journal.h"

namespace tensorbroker::daemon {

// How clients will map a block: immutable blocks (sealed tensors) are mapped read-only by
// consumers (only their owner's creator writes them, before Seal), mutable ones read-write by
// every holder. CPU pools keep the two kinds apart: immutable blocks share segments with other
// immutable blocks of the same owner only, and each mutable block has a segment of its own
// that is never reused, so a writable descriptor reaches exactly what its holder may write.
enum class BlockKind { kImmutable, kMutable };

// One allocation. `segment` names what a client maps (for CPU: the shm name); the bytes are
// [offset, offset + size) of it. `data` is the daemon's own mapping of the first byte.
struct Block {
  std::string segment;
  uint64_t segment_size = 0;
  uint64_t offset = 0;
  uint64_t size = 0;        // rounded up to the alignment
  uint8_t* data = nullptr;  // CUDA: a device pointer
  DLDevice device{kDLCPU, 0};
  std::string export_handle;  // legacy CUDA: the slab's IPC handle bytes; else empty
  // The segment's descriptors, borrowed: valid while any block of the segment is allocated. A
  // VMM CUDA slab has one descriptor, here twice: the grant says how to map it. -1 for legacy
  // CUDA slabs, which have none.
  int read_write_fd = -1;
  int read_only_fd = -1;
};

// `value` rounded up to a multiple of `multiple` (sizes of blocks, segments and slabs).
inline uint64_t RoundUp(uint64_t value, uint64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

struct PoolStats {
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;      // allocated to blocks
  uint64_t reserved_bytes = 0;  // of segments
  uint64_t segments = 0;
  // How consumers reach the memory: "memfd" (CPU segments), "cuda-vmm" (POSIX descriptors of
  // CUDA VMM allocations) or "cuda-ipc" (legacy CUDA IPC handles).
  std::string handles = "memfd";
};

class MemoryPool {
 public:
  virtual ~MemoryPool() = default;
  virtual DLDevice device() const = 0;
  // RESOURCE_EXHAUSTED when the pool's capacity or the system cannot give `nbytes`. May remove
  // idle segments to make room; their names are appended to `removed_segments`. Blocks share
  // a segment only when their `sharing_key` is equal (the owner and the readers: a descriptor
  // reaches the whole segment); CUDA pools ignore it.
  virtual absl::StatusOr<Block> Allocate(uint64_t nbytes, BlockKind kind,
                                         const std::string& sharing_key,
                                         std::vector<std::string>* removed_segments) = 0;
  // Returns a block; appends the names of segments this removed to `removed_segments`.
  virtual void Free(const Block& block, std::vector<std::string>* removed_segments) = 0;
  virtual PoolStats Stats() const = 0;
  // The restart's grace period is over: memory adopted from a previous instance may be reused
  // (cpu_segment_pool.h). Nothing to do for pools that adopt nothing.
  virtual void EndAdoptionGrace() {}
  // Tells `journal` of every segment it holds (a takeover's state, handover.h). Nothing for
  // pools whose memory cannot outlive the process (legacy CUDA IPC slabs).
  virtual void ReplaySegments(PersistenceJournal* /*journal*/) const {}

  // Adoption of what a previous instance left (adoption.h), before the pool serves: its
  // segments (`size`: 0 where the segment itself says, as a memfd does), then the blocks its
  // published tensors occupy, then RemoveUnclaimed. Segments keep their names. INVALID_ARGUMENT
  // (saying why) for a descriptor that is not such a segment or a range that is not free;
  // ALREADY_EXISTS for a name taken; FAILED_PRECONDITION for a pool that adopts nothing.
  virtual absl::Status AdoptSegment(const std::string& name, UniqueFd fd, uint64_t size);
  // The block [offset, offset + size) of the adopted `segment` for a tensor of `kind` and
  // `sharing_key` (adopted_claim.h says what may share a segment).
  virtual absl::StatusOr<Block> AdoptBlock(const std::string& segment, uint64_t offset,
                                           uint64_t size, BlockKind kind,
                                           const std::string& sharing_key);
  // Removes the adopted segments that no block was adopted into; appends their names.
  virtual void RemoveUnclaimed(std::vector<std::string>* /*removed_segments*/) {}
};

inline absl::Status MemoryPool::AdoptSegment(const std::string& name, UniqueFd, uint64_t) {
  return absl::FailedPreconditionError("this pool's memory cannot outlive a process: " + name);
}

inline absl::StatusOr<Block> MemoryPool::AdoptBlock(const std::string& segment, uint64_t, uint64_t,
                                                    BlockKind, const std::string&) {
  return absl::FailedPreconditionError("this pool adopts nothing: " + segment);
}

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_MEMORY_POOL_H_
