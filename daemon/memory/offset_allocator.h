// Carves aligned byte ranges out of one segment: first fit over an address-ordered free list,
// neighbours coalesced on free. Its bookkeeping lives in the daemon's private memory, never in
// the shared segment, so no client can corrupt it.
//
// Not thread-safe: the owner (SegmentPool, under the store's lock) serialises calls.
#ifndef TENSORBROKER_DAEMON_OFFSET_ALLOCATOR_H_
#define TENSORBROKER_DAEMON_OFFSET_ALLOCATOR_H_

#include <cstdint>
#include <map>
#include <optional>

namespace tensorbroker::daemon {

class OffsetAllocator {
 public:
  // `capacity` bytes, every returned offset a multiple of `alignment` (a power of two).
  OffsetAllocator(uint64_t capacity, uint64_t alignment);

  // Reserves at least `bytes` (rounded up to the alignment; 0 counts as 1) and returns the
  // offset, or nullopt when no free range is large enough.
  std::optional<uint64_t> Allocate(uint64_t bytes);
  // Reserves exactly [offset, offset + `bytes` rounded up) when it is aligned and free (to take
  // back what a previous instance had allocated); false, changing nothing, otherwise.
  bool AllocateAt(uint64_t offset, uint64_t bytes);
  // Returns a range from Allocate. Returns false (and changes nothing) for an unknown offset.
  bool Free(uint64_t offset);

  uint64_t capacity() const { return capacity_; }
  uint64_t used() const { return used_; }
  size_t allocations() const { return allocated_.size(); }
  bool empty() const { return allocated_.empty(); }
  // The rounded size of the allocation at `offset`, 0 if none.
  uint64_t SizeAt(uint64_t offset) const;

 private:
  uint64_t capacity_;
  uint64_t alignment_;
  uint64_t used_ = 0;
  std::map<uint64_t, uint64_t> free_;       // offset -> size, disjoint and never adjacent
  std::map<uint64_t, uint64_t> allocated_;  // offset -> size
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_OFFSET_ALLOCATOR_H_
