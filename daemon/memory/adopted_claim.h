// The check both pools make when a previous instance's tensor is adopted into a segment or slab
// it left (adoption.h): the bytes must be free, and the segment may hold only blocks it could
// have shared with this one (same kind and sharing key, neither dedicated). Values only; not
// thread-safe (the pools are called under the store's lock).
#ifndef TENSORBROKER_DAEMON_ADOPTED_CLAIM_H_
#define TENSORBROKER_DAEMON_ADOPTED_CLAIM_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "daemon/memory/memory_pool.h"
#include "daemon/memory/offset_allocator.h"

namespace tensorbroker::daemon {

// What an adopted segment holds so far: nothing (claimed false), or blocks of one kind and key.
struct AdoptedClaim {
  bool claimed = false;
  BlockKind kind = BlockKind::kImmutable;
  std::string sharing_key;
  bool dedicated = false;
};

// Takes [offset, offset + size) of `allocator` (segment `name`, `segment_size` bytes) for a
// block of `kind` and `sharing_key`, `dedicated` or not, and records it in `claim`.
// INVALID_ARGUMENT naming the segment when the segment holds a block it may not share with this
// one, or the range is not free or out of bounds.
absl::Status ClaimAdoptedBlock(const std::string& name, uint64_t segment_size, uint64_t offset,
                               uint64_t size, BlockKind kind, const std::string& sharing_key,
                               bool dedicated, OffsetAllocator* allocator, AdoptedClaim* claim);

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_ADOPTED_CLAIM_H_
