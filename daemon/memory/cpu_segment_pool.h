// CPU tensors in memfd segments (MemfdSegment). Small immutable tensors share pooled segments
// (one descriptor and mapping per segment serves many Gets); a tensor larger than the dedicated
// threshold gets a segment of its own. Every block is 256-byte aligned.
//
// Principals: a segment belongs to one sharing key (its owner uid and the tensor's readers) for
// its whole life. Immutable tensors share segments only with tensors of the same key, since the
// owner's creators receive a writable descriptor of the segment and every reader a read-only
// descriptor of all of it. Every mutable tensor gets a segment of its own that is removed
// with it (never reused): its holders, of any uid, receive a writable descriptor and keep it.
//
// Capacity counts segment bytes, reserved when created. When an immutable segment goes idle
// (empty), one idle pooled and one idle dedicated segment per key are kept for reuse: reusing
// them spares the reservation and, above all, lets clients keep their cached mappings, whose
// pages are already faulted in. Idle segments are dropped first whenever capacity runs short.
// Segment names are "<prefix><seq>", unique for the life of the daemon.
#ifndef TENSORBROKER_DAEMON_CPU_SEGMENT_POOL_H_
#define TENSORBROKER_DAEMON_CPU_SEGMENT_POOL_H_

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "daemon/base/persistence_journal.h"
#include "daemon/memory/memfd_segment.h"
#include "daemon/memory/memory_pool.h"
#include "daemon/memory/offset_allocator.h"

namespace tensorbroker::daemon {

struct CpuSegmentPoolOptions {
  uint64_t capacity_bytes = 0;
  std::string name_prefix;                      // e.g. "tb-1a2b3c4d-9f8e7d6c-"
  uint64_t pooled_segment_bytes = 64ull << 20;  // size of a shared segment
  uint64_t dedicated_threshold = 16ull << 20;   // larger tensors get their own segment
  // Told of each segment created and removed (not of those dropped at destruction); may be
  // null. Must outlive the pool.
  PersistenceJournal* journal = nullptr;
};

class CpuSegmentPool final : public MemoryPool {
 public:
  explicit CpuSegmentPool(CpuSegmentPoolOptions options);

  DLDevice device() const override { return {kDLCPU, 0}; }
  absl::StatusOr<Block> Allocate(uint64_t nbytes, BlockKind kind, const std::string& owner,
                                 std::vector<std::string>* removed_segments) override;
  void Free(const Block& block, std::vector<std::string>* removed_segments) override;
  PoolStats Stats() const override;

  // Adoption (memory_pool.h): `read_write` must be what MemfdSegment::Create made (its size is
  // the segment's; `size` is ignored).
  absl::Status AdoptSegment(const std::string& name, UniqueFd read_write, uint64_t size) override;
  absl::StatusOr<Block> AdoptBlock(const std::string& segment, uint64_t offset, uint64_t size,
                                   BlockKind kind, const std::string& sharing_key) override;
  void RemoveUnclaimed(std::vector<std::string>* removed_segments) override;
  // Until this is called, no new block goes into an adopted segment, and one that empties is
  // removed, not kept: clients of the previous instance may still have its pages mapped (views
  // they held across the restart, tensors they were writing) until they reconnect and take
  // their leases again.
  void EndAdoptionGrace() override;
  void ReplaySegments(PersistenceJournal* journal) const override;

 private:
  struct Segment {
    MemfdSegment memory;
    OffsetAllocator allocator;
    BlockKind kind;
    std::string owner;  // the sharing key: owner uid and readers
    bool dedicated;
    bool adopted = false;  // from a previous instance, until EndAdoptionGrace
    bool claimed = true;   // false for an adopted segment until a block is adopted into it
  };

  // Creates a segment, first dropping idle pooled segments if capacity is short.
  absl::StatusOr<Segment*> NewSegment(uint64_t size, BlockKind kind, const std::string& owner,
                                      bool dedicated, std::vector<std::string>* removed_segments);
  uint64_t CapacityLeft() const;
  // The usual size of a pooled segment: the option, capped at an eighth of the capacity.
  uint64_t PooledSegmentBytes() const;
  Block MakeBlock(const Segment& segment, uint64_t offset) const;
  // An idle dedicated immutable segment of `owner` that `bytes` would fill at least half
  // of, or null.
  Segment* FindIdleDedicated(uint64_t bytes, const std::string& owner);
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
