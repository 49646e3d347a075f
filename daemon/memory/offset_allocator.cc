#include "daemon/memory/offset_allocator.h"

namespace tensorbroker::daemon {

OffsetAllocator::OffsetAllocator(uint64_t capacity, uint64_t alignment)
    : capacity_(capacity & ~(alignment - 1)), alignment_(alignment) {
  if (capacity_ > 0) free_.emplace(0, capacity_);
}

std::optional<uint64_t> OffsetAllocator::Allocate(uint64_t bytes) {
  if (bytes == 0) bytes = 1;
  if (bytes > capacity_) return std::nullopt;
  const uint64_t size = (bytes + alignment_ - 1) & ~(alignment_ - 1);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < size) continue;
    const uint64_t offset = it->first;
    const uint64_t rest = it->second - size;
    free_.erase(it);
    if (rest > 0) free_.emplace(offset + size, rest);
    allocated_.emplace(offset, size);
    used_ += size;
    return offset;
  }
  return std::nullopt;
}

bool OffsetAllocator::AllocateAt(uint64_t offset, uint64_t bytes) {
  if (bytes == 0) bytes = 1;
  if (offset % alignment_ != 0 || bytes > capacity_) return false;
  const uint64_t size = (bytes + alignment_ - 1) & ~(alignment_ - 1);
  auto it = free_.upper_bound(offset);
  if (it == free_.begin()) return false;
  --it;  // the free range starting at or before `offset`
  const uint64_t start = it->first;
  const uint64_t end = start + it->second;
  if (offset + size > end || offset + size < offset) return false;
  free_.erase(it);
  if (offset > start) free_.emplace(start, offset - start);
  if (offset + size < end) free_.emplace(offset + size, end - offset - size);
  allocated_.emplace(offset, size);
  used_ += size;
  return true;
}

bool OffsetAllocator::Free(uint64_t offset) {
  auto found = allocated_.find(offset);
  if (found == allocated_.end()) return false;
  uint64_t start = offset;
  uint64_t size = found->second;
  allocated_.erase(found);
  used_ -= size;
  auto next = free_.lower_bound(start);
  if (next != free_.end() && next->first == start + size) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  free_.emplace(start, size);
  return true;
}

uint64_t OffsetAllocator::SizeAt(uint64_t offset) const {
  auto it = allocated_.find(offset);
  return it == allocated_.end() ? 0 : it->second;
}

}  // namespace tensorbroker::daemon
