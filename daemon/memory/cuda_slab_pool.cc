#include "daemon/memory/cuda_slab_pool.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/tensor_layout.h"

namespace tensorbroker::daemon {
CudaSlabPool::CudaSlabPool(CudaSlabPoolOptions options) : options_(std::move(options)) {}

absl::StatusOr<CudaSlabPool::SlabMap::iterator> CudaSlabPool::NewSlab(uint64_t bytes,
                                                                      bool dedicated) {
  const uint64_t size = RoundUp(bytes, CudaSlab::kGranularity);
  if (reserved_bytes_ + size > options_.capacity_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cuda:", options_.ordinal, " capacity (--cuda-capacity ",
                     options_.capacity_bytes, " bytes) has ",
                     options_.capacity_bytes - reserved_bytes_, " bytes left; ", size, " needed"));
  }
  auto memory = CudaSlab::Allocate(options_.ordinal, size);
  if (!memory.ok()) return memory.status();
  std::string name =
      absl::StrCat(options_.name_prefix, "cuda", options_.ordinal, "-", next_sequence_++);
  reserved_bytes_ += (*memory)->size();
  OffsetAllocator allocator((*memory)->size(), kDataAlignment);
  return slabs_.emplace(std::move(name), Slab{std::move(*memory), std::move(allocator), dedicated})
      .first;
}

Block CudaSlabPool::MakeBlock(const std::string& name, const Slab& slab, uint64_t offset) const {
  Block block;
  block.segment = name;
  block.segment_size = slab.memory->size();
  block.offset = offset;
  block.size = slab.allocator.SizeAt(offset);
  block.data = slab.memory->data() + offset;
  block.device = device();
  block.export_handle = slab.memory->ipc_handle();
  return block;
}

absl::StatusOr<Block> CudaSlabPool::Allocate(uint64_t nbytes, BlockKind, const std::string&,
                                             std::vector<std::string>*) {
  const uint64_t rounded = RoundUp(std::max<uint64_t>(nbytes, 1), kDataAlignment);
  const bool dedicated = rounded > options_.dedicated_threshold;
  if (!dedicated) {
    for (auto& [name, slab] : slabs_) {
      if (slab.dedicated) continue;
      if (auto offset = slab.allocator.Allocate(rounded)) {
        used_bytes_ += slab.allocator.SizeAt(*offset);
        return MakeBlock(name, slab, *offset);
      }
    }
  }
  const uint64_t left = options_.capacity_bytes - reserved_bytes_;
  const uint64_t pooled =
      std::min(options_.pooled_slab_bytes, left / CudaSlab::kGranularity * CudaSlab::kGranularity);
  auto slab = NewSlab(dedicated ? rounded : std::max(rounded, pooled), dedicated);
  if (!slab.ok()) return slab.status();
  auto& [name, fresh] = **slab;
  auto offset = fresh.allocator.Allocate(rounded);
  if (!offset) return absl::InternalError("fresh slab could not hold its first block");
  used_bytes_ += fresh.allocator.SizeAt(*offset);
  return MakeBlock(name, fresh, *offset);
}

void CudaSlabPool::Free(const Block& block, std::vector<std::string>* removed_segments) {
  auto it = slabs_.find(block.segment);
  if (it == slabs_.end()) return;
  Slab& slab = it->second;
  used_bytes_ -= slab.allocator.SizeAt(block.offset);
  slab.allocator.Free(block.offset);
  if (!slab.allocator.empty()) return;
  // No block, so no lease, refers to the slab: nobody can have its handle open any more.
  reserved_bytes_ -= slab.memory->size();
  removed_segments->push_back(it->first);
  slabs_.erase(it);
}

PoolStats CudaSlabPool::Stats() const {
  PoolStats stats;
  stats.capacity_bytes = options_.capacity_bytes;
  stats.used_bytes = used_bytes_;
  stats.reserved_bytes = reserved_bytes_;
  stats.segments = slabs_.size();
  return stats;
}

}  // namespace tensorbroker::daemon
