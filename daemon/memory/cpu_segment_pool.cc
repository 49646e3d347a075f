#include "daemon/memory/cpu_segment_pool.h"

#include <unistd.h>

#include <algorithm>
#include <functional>

#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "common/tensor_layout.h"
#include "daemon/memory/adopted_claim.h"

namespace tensorbroker::daemon {
CpuSegmentPool::CpuSegmentPool(CpuSegmentPoolOptions options) : options_(std::move(options)) {}

uint64_t CpuSegmentPool::PooledSegmentBytes() const {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  return std::max(
      page, std::min(options_.pooled_segment_bytes, options_.capacity_bytes / 8 / page * page));
}

uint64_t CpuSegmentPool::CapacityLeft() const {
  return options_.capacity_bytes - std::min(reserved_bytes_, options_.capacity_bytes);
}

absl::StatusOr<CpuSegmentPool::Segment*> CpuSegmentPool::NewSegment(
    uint64_t size, BlockKind kind, const std::string& owner, bool dedicated,
    std::vector<std::string>* removed_segments) {
  if (size > CapacityLeft()) {
    RemoveIdle([](const Segment&) { return true; }, removed_segments);
  }
  if (size > CapacityLeft()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("capacity exhausted: a new ", FormatByteSize(size), " segment does not fit; ",
                     FormatByteSize(reserved_bytes_), " of the ",
                     FormatByteSize(options_.capacity_bytes), " capacity (--capacity) is in use"));
  }
  const std::string name = absl::StrCat(options_.name_prefix, next_sequence_++);
  auto memory = MemfdSegment::Create(name, size);
  if (!memory.ok()) return memory.status();
  auto segment = std::make_unique<Segment>(
      Segment{std::move(*memory), OffsetAllocator(size, kDataAlignment), kind, owner, dedicated});
  Segment* raw = segment.get();
  segments_.emplace(name, std::move(segment));
  reserved_bytes_ += size;
  if (options_.journal != nullptr) options_.journal->SegmentCreated(raw->memory);
  return raw;
}

Block CpuSegmentPool::MakeBlock(const Segment& segment, uint64_t offset) const {
  Block block;
  block.segment = segment.memory.name();
  block.segment_size = segment.memory.size();
  block.offset = offset;
  block.size = segment.allocator.SizeAt(offset);
  block.data = segment.memory.data() + offset;
  block.device = device();
  block.read_write_fd = segment.memory.read_write_fd();
  block.read_only_fd = segment.memory.read_only_fd();
  return block;
}

absl::StatusOr<Block> CpuSegmentPool::Allocate(uint64_t nbytes, BlockKind kind,
                                               const std::string& owner,
                                               std::vector<std::string>* removed_segments) {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t rounded = RoundUp(std::max<uint64_t>(nbytes, 1), kDataAlignment);
  Segment* segment = nullptr;
  if (kind == BlockKind::kMutable || rounded > options_.dedicated_threshold) {
    if (kind == BlockKind::kImmutable) segment = FindIdleDedicated(rounded, owner);
    if (segment == nullptr) {
      auto created =
          NewSegment(RoundUp(rounded, page), kind, owner, /*dedicated=*/true, removed_segments);
      if (!created.ok()) return created.status();
      segment = *created;
    }
  } else {
    for (auto& [name, candidate] : segments_) {
      if (candidate->dedicated || candidate->adopted || candidate->kind != kind ||
          candidate->owner != owner) {
        continue;
      }
      if (auto offset = candidate->allocator.Allocate(rounded)) {
        used_bytes_ += candidate->allocator.SizeAt(*offset);
        return MakeBlock(*candidate, *offset);
      }
    }
    // A new pooled segment: at most an eighth of the capacity, so that one small tensor never
    // reserves room that the other kind or a large tensor needs; smaller when little is left.
    const uint64_t pooled = std::min(PooledSegmentBytes(), CapacityLeft() / page * page);
    const uint64_t size = std::max(RoundUp(rounded, page), pooled);
    auto created = NewSegment(size, kind, owner, /*dedicated=*/false, removed_segments);
    if (!created.ok()) return created.status();
    segment = *created;
  }
  auto offset = segment->allocator.Allocate(rounded);
  if (!offset) return absl::InternalError("fresh segment could not hold its first block");
  used_bytes_ += segment->allocator.SizeAt(*offset);
  return MakeBlock(*segment, *offset);
}

void CpuSegmentPool::Free(const Block& block, std::vector<std::string>* removed_segments) {
  auto it = segments_.find(block.segment);
  if (it == segments_.end()) return;
  Segment& segment = *it->second;
  used_bytes_ -= segment.allocator.SizeAt(block.offset);
  segment.allocator.Free(block.offset);
  if (!segment.allocator.empty()) return;
  // A mutable tensor's segment goes with it: its holders keep writable descriptors of it.
  // Otherwise keep the segment that just went idle (a full-size pooled one, or a dedicated
  // one) for its owner's reuse, and drop the idle segment of that owner it replaces.
  // An adopted segment is not kept during the restart's grace period (EndAdoptionGrace).
  const bool keep = segment.kind == BlockKind::kImmutable && !segment.adopted &&
                    (segment.dedicated || segment.memory.size() == PooledSegmentBytes());
  // Copies: RemoveIdle may erase `segment` itself before it asks about the segments after it.
  const BlockKind kind = segment.kind;
  const std::string owner = segment.owner;
  const bool dedicated = segment.dedicated;
  const std::string name = it->first;
  RemoveIdle(
      [&](const Segment& s) {
        return s.kind == kind && s.owner == owner && s.dedicated == dedicated &&
               (!keep || s.memory.name() != name);
      },
      removed_segments);
}

CpuSegmentPool::Segment* CpuSegmentPool::FindIdleDedicated(uint64_t bytes,
                                                           const std::string& owner) {
  for (auto& [name, s] : segments_) {
    // Reuse only when the tensor fills at least half of it: idle memory is not free memory.
    if (s->dedicated && !s->adopted && s->kind == BlockKind::kImmutable && s->owner == owner &&
        s->allocator.empty() && s->memory.size() >= bytes && s->memory.size() / 2 <= bytes) {
      return s.get();
    }
  }
  return nullptr;
}

void CpuSegmentPool::RemoveIdle(const std::function<bool(const Segment&)>& should_remove,
                                std::vector<std::string>* removed_segments) {
  for (auto it = segments_.begin(); it != segments_.end();) {
    if (!it->second->allocator.empty() || !should_remove(*it->second)) {
      ++it;
      continue;
    }
    reserved_bytes_ -= it->second->memory.size();
    removed_segments->push_back(it->first);
    if (options_.journal != nullptr) options_.journal->SegmentRemoved(it->first);
    it = segments_.erase(it);
  }
}

void CpuSegmentPool::ReplaySegments(PersistenceJournal* journal) const {
  for (const auto& [name, segment] : segments_) journal->SegmentCreated(segment->memory);
}

void CpuSegmentPool::EndAdoptionGrace() {
  for (auto& [name, segment] : segments_) segment->adopted = false;
}

absl::Status CpuSegmentPool::AdoptSegment(const std::string& name, UniqueFd read_write,
                                          uint64_t /*size*/) {
  if (segments_.count(name) != 0) {
    return absl::AlreadyExistsError(absl::StrCat("segment ", name, " is already there"));
  }
  auto memory = MemfdSegment::Adopt(name, std::move(read_write));
  if (!memory.ok()) return memory.status();
  const uint64_t size = memory->size();
  auto segment = std::make_unique<Segment>(Segment{
      std::move(*memory), OffsetAllocator(size, kDataAlignment), BlockKind::kImmutable, "", false});
  segment->adopted = true;
  segment->claimed = false;
  segments_.emplace(name, std::move(segment));
  reserved_bytes_ += size;
  return absl::OkStatus();
}

absl::StatusOr<Block> CpuSegmentPool::AdoptBlock(const std::string& segment_name, uint64_t offset,
                                                 uint64_t size, BlockKind kind,
                                                 const std::string& sharing_key) {
  auto it = segments_.find(segment_name);
  if (it == segments_.end() || !it->second->adopted) {
    return absl::InvalidArgumentError(
        absl::StrCat("segment ", segment_name, " was not handed over"));
  }
  Segment& segment = *it->second;
  const bool dedicated =
      kind == BlockKind::kMutable || RoundUp(size, kDataAlignment) > options_.dedicated_threshold;
  AdoptedClaim claim{segment.claimed, segment.kind, segment.owner, segment.dedicated};
  if (absl::Status claimed =
          ClaimAdoptedBlock(segment_name, segment.memory.size(), offset, size, kind, sharing_key,
                            dedicated, &segment.allocator, &claim);
      !claimed.ok()) {
    return claimed;
  }
  segment.claimed = true;
  segment.kind = kind;
  segment.owner = sharing_key;
  segment.dedicated = dedicated;
  used_bytes_ += segment.allocator.SizeAt(offset);
  return MakeBlock(segment, offset);
}

void CpuSegmentPool::RemoveUnclaimed(std::vector<std::string>* removed_segments) {
  RemoveIdle([](const Segment& s) { return !s.claimed; }, removed_segments);
}

PoolStats CpuSegmentPool::Stats() const {
  PoolStats stats;
  stats.capacity_bytes = options_.capacity_bytes;
  stats.used_bytes = used_bytes_;
  stats.reserved_bytes = reserved_bytes_;
  stats.segments = segments_.size();
  return stats;
}

}  // namespace tensorbroker::daemon
