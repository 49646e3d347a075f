#include "daemon/memory/cuda_slab_pool.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/tensor_layout.h"

namespace tensorbroker::daemon {
CudaSlabPool::CudaSlabPool(CudaSlabPoolOptions options) : options_(std::move(options)) {}

bool CudaSlabPool::Dedicated(uint64_t rounded, BlockKind kind) const {
  return rounded > options_.dedicated_threshold ||
         (options_.handles == CudaHandles::kVmm && kind == BlockKind::kMutable);
}

absl::StatusOr<CudaSlabPool::SlabMap::iterator> CudaSlabPool::NewSlab(uint64_t bytes,
                                                                      bool dedicated,
                                                                      std::string sharing_key) {
  const uint64_t size = RoundUp(bytes, options_.granularity);
  if (reserved_bytes_ + size > options_.capacity_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cuda:", options_.ordinal, " capacity (--cuda-capacity ",
                     options_.capacity_bytes, " bytes) has ",
                     options_.capacity_bytes - reserved_bytes_, " bytes left; ", size, " needed"));
  }
  auto memory = options_.handles == CudaHandles::kVmm
                    ? VmmCudaSlab::Allocate(options_.ordinal, size)
                    : LegacyCudaSlab::Allocate(options_.ordinal, size);
  if (!memory.ok()) return memory.status();
  std::string name =
      absl::StrCat(options_.name_prefix, "cuda", options_.ordinal, "-", next_sequence_++);
  auto it = AddSlab(std::move(name), *std::move(memory), dedicated, std::move(sharing_key));
  const int fd = it->second.memory->fd();
  if (options_.journal != nullptr && fd >= 0) options_.journal->CudaSlabCreated(it->first, fd);
  return it;
}

CudaSlabPool::SlabMap::iterator CudaSlabPool::AddSlab(std::string name,
                                                      std::unique_ptr<CudaSlab> memory,
                                                      bool dedicated, std::string sharing_key) {
  reserved_bytes_ += memory->size();
  OffsetAllocator allocator(memory->size(), kDataAlignment);
  return slabs_
      .emplace(std::move(name),
               Slab{std::move(memory), std::move(allocator), dedicated, std::move(sharing_key)})
      .first;
}

void CudaSlabPool::RemoveSlab(SlabMap::iterator it, std::vector<std::string>* removed_segments) {
  reserved_bytes_ -= it->second.memory->size();
  removed_segments->push_back(it->first);
  if (options_.journal != nullptr && it->second.memory->fd() >= 0) {
    options_.journal->CudaSlabRemoved(it->first);
  }
  slabs_.erase(it);
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
  block.read_write_fd = slab.memory->fd();
  block.read_only_fd = slab.memory->fd();
  return block;
}

absl::StatusOr<Block> CudaSlabPool::Allocate(uint64_t nbytes, BlockKind kind,
                                             const std::string& sharing_key,
                                             std::vector<std::string>*) {
  const uint64_t rounded = RoundUp(std::max<uint64_t>(nbytes, 1), kDataAlignment);
  const bool dedicated = Dedicated(rounded, kind);
  const std::string key = options_.handles == CudaHandles::kVmm ? sharing_key : std::string();
  if (!dedicated) {
    for (auto& [name, slab] : slabs_) {
      // Adopted slabs take no new block in the grace period (cpu_segment_pool.h says why).
      if (slab.dedicated || slab.adopted || slab.sharing_key != key) continue;
      if (auto offset = slab.allocator.Allocate(rounded)) {
        used_bytes_ += slab.allocator.SizeAt(*offset);
        return MakeBlock(name, slab, *offset);
      }
    }
  }
  const uint64_t left =
      options_.capacity_bytes - std::min(reserved_bytes_, options_.capacity_bytes);
  const uint64_t pooled =
      std::min(options_.pooled_slab_bytes, left / options_.granularity * options_.granularity);
  auto slab = NewSlab(dedicated ? rounded : std::max(rounded, pooled), dedicated, key);
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
  // No block, so no lease, refers to the slab: nobody can have it mapped through us any more.
  if (slab.allocator.empty()) RemoveSlab(it, removed_segments);
}

PoolStats CudaSlabPool::Stats() const {
  PoolStats stats;
  stats.capacity_bytes = options_.capacity_bytes;
  stats.used_bytes = used_bytes_;
  stats.reserved_bytes = reserved_bytes_;
  stats.segments = slabs_.size();
  stats.handles = CudaHandlesName(options_.handles);
  return stats;
}

void CudaSlabPool::EndAdoptionGrace() {
  for (auto& [name, slab] : slabs_) slab.adopted = false;
}

void CudaSlabPool::ReplaySegments(PersistenceJournal* journal) const {
  for (const auto& [name, slab] : slabs_) {
    if (slab.memory->fd() >= 0) journal->CudaSlabCreated(name, slab.memory->fd());
  }
}

absl::Status CudaSlabPool::AdoptSegment(const std::string& name, UniqueFd fd, uint64_t size) {
  if (options_.handles != CudaHandles::kVmm) {
    return absl::FailedPreconditionError(
        absl::StrCat("cuda:", options_.ordinal,
                     " is served with legacy CUDA IPC handles (--cuda-handles ipc or no VMM "
                     "support), which cannot adopt VMM slab ",
                     name));
  }
  if (slabs_.count(name) != 0) {
    return absl::AlreadyExistsError(absl::StrCat("CUDA slab ", name, " is already there"));
  }
  if (size == 0 || size % options_.granularity != 0) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA slab ", name, ": ", size,
                                                   " bytes is not a multiple of the granularity ",
                                                   options_.granularity));
  }
  auto memory = VmmCudaSlab::Adopt(options_.ordinal, std::move(fd), size);
  if (!memory.ok()) return memory.status();
  Slab& slab = AddSlab(name, *std::move(memory), false, "")->second;
  slab.adopted = true;
  return absl::OkStatus();
}

absl::StatusOr<Block> CudaSlabPool::AdoptBlock(const std::string& slab_name, uint64_t offset,
                                               uint64_t size, BlockKind kind,
                                               const std::string& sharing_key) {
  auto it = slabs_.find(slab_name);
  if (it == slabs_.end() || !it->second.adopted) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA slab ", slab_name, " was not handed over"));
  }
  Slab& slab = it->second;
  const bool dedicated = Dedicated(RoundUp(size, kDataAlignment), kind);
  if (absl::Status claimed =
          ClaimAdoptedBlock(slab_name, slab.memory->size(), offset, size, kind, sharing_key,
                            dedicated, &slab.allocator, &slab.claim);
      !claimed.ok()) {
    return claimed;
  }
  slab.dedicated = dedicated;
  slab.sharing_key = sharing_key;
  used_bytes_ += slab.allocator.SizeAt(offset);
  return MakeBlock(slab_name, slab, offset);
}

void CudaSlabPool::RemoveUnclaimed(std::vector<std::string>* removed_segments) {
  for (auto it = slabs_.begin(); it != slabs_.end();) {
    auto next = std::next(it);
    if (it->second.adopted && !it->second.claim.claimed) RemoveSlab(it, removed_segments);
    it = next;
  }
}

}  // namespace tensorbroker::daemon
