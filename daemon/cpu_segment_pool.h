// CPU tensors in POSIX shared memory. Small tensors share pooled segments (one mapping per
// segment serves many Gets); a tensor larger than a pooled segment's dedicated threshold gets
// a segment of its own. Every block is 256-byte aligned. Immutable and mutable tensors never
// share a segment (see BlockKind).
//
// Capacity counts segment bytes, which are reserved in tmpfs when created. When a segment goes
// idle (empty), one idle pooled and one idle dedicated segment per kind are kept for reuse:
// reusing them spares tmpfs reservation and, above all, lets clients keep their cached
// mappings, whose pages are already faulted in. Idle segments are dropped first whenever
// capacity runs short.
// Segment names are "<prefix><seq>", unique for the life of the daemon.
#ifndef TENSORBROKER_DAEMON_CPU_SEGMENT_POOL_H_
#define TENSORBROKER_DAEMON_CPU_SEGMENT_POOL_H_

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "daemon/memory_pool.h"
#include "daemon/offset_allocator.h"
#include "daemon/shm_segment.h"

namespace tensorbroker::daemon {

struct CpuSegmentPoolOptions {
  uint64_t capacity_bytes = 0;
  std::string name_prefix;                         // e.g. "tb-1a2b3c4d-9f8e7d6c-"
  uint64_t pooled_segment_bytes = 64ull << 20;     // size of a shared segment
  uint64_t dedicated_threshold = 16ull << 20;      // larger tensors get their own segment
};

class CpuSegmentPool final : public MemoryPool {
 public:
  explicit CpuSegmentPool(CpuSegmentPoolOptions options);

  DLDevice device() const override { return {kDLCPU, 0}; }
  absl::StatusOr<Block> Allocate(uint64_t nbytes, BlockKind kind,
                                 std::vector<std::string>* removed_segments) override;
  void Free(const Block& block, std::vector<std::string>* removed_segments) override;
  PoolStats Stats() const override;

 private:
  struct Segment {
    ShmSegment shm;
    OffsetAllocator allocator;
    BlockKind kind;
    bool dedicated;
  };

  // Creates a segment, first dropping idle pooled segments if capacity is short.
  absl::StatusOr<Segment*> NewSegment(uint64_t size, BlockKind kind, bool dedicated,
                                      std::vector<std::string>* removed_segments);
  uint64_t CapacityLeft() const;
  // The usual size of a pooled segment: the option, capped at an eighth of the capacity.
  uint64_t PooledSegmentBytes() const;
  Block MakeBlock(const Segment& segment, uint64_t offset) const;
  // An idle dedicated segment that `bytes` would fill at least half of, or null.
  Segment* FindIdleDedicated(uint64_t bytes, BlockKind kind);
  // Removes every idle (empty) segment for which `should_remove` is true.
  void RemoveIdle(const std::function<bool(const Segment&)>& should_remove,
                  std::vector<std::string>* removed_segments);

  CpuSegmentPoolOptions options_;
  uint64_t next_sequence_ = 0;
  uint64_t reserved_bytes_ = 0;
  uint64_t used_bytes_ = 0;
  std::map<std::string, std::unique_ptr<Segment>> segments_;  // by name
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_CPU_SEGMENT_POOL_H_
