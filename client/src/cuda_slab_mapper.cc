#include "client/src/cuda_slab_mapper.h"

#include <cstdio>

#include "absl/strings/match.h"
#include "common/cuda_runtime.h"

namespace tensorbroker::client_internal {

absl::StatusOr<std::shared_ptr<const OpenedSlab>> CudaSlabMapper::Open(
    const std::string& name, const std::string& ipc_handle, int ordinal, uint64_t size) {
  MutexLock lock(mu_);
  if (auto it = open_.find(name); it != open_.end()) {
    if (std::shared_ptr<const OpenedSlab> slab = it->second.current.lock()) return slab;
    // The last holder is being released right now; its handle is still open: reuse it.
    return NewGroupLocked(name, &it->second);
  }
  auto data = CudaOpenIpcHandle(ipc_handle, ordinal);
  if (!data.ok()) return data.status();
  Entry& entry = open_[name];
  entry.slab = OpenedSlab{*data, ordinal, size};
  return NewGroupLocked(name, &entry);
}

std::shared_ptr<const OpenedSlab> CudaSlabMapper::NewGroupLocked(const std::string& name,
                                                                 Entry* entry) {
  ++entry->groups;
  std::shared_ptr<const OpenedSlab> group(new OpenedSlab(entry->slab),
                                          [this, name](const OpenedSlab* g) { Release(name, g); });
  entry->current = group;
  return group;
}

void CudaSlabMapper::Release(const std::string& name, const OpenedSlab* group) {
  delete group;
  MutexLock lock(mu_);
  auto it = open_.find(name);
  if (it == open_.end() || --it->second.groups > 0) return;
  const OpenedSlab slab = it->second.slab;
  open_.erase(it);
  absl::Status closed = CudaCloseIpcHandle(slab.data, slab.ordinal);
  // At process exit the runtime may be unloaded before the last tensors go: nothing to close.
  if (!closed.ok() && !absl::StrContains(closed.message(), "cudaErrorCudartUnloading")) {
    std::fprintf(stderr, "tensorbroker: closing CUDA slab %s: %s\n", name.c_str(),
                 std::string(closed.message()).c_str());
  }
}

size_t CudaSlabMapper::open() const {
  MutexLock lock(mu_);
  return open_.size();
}

CudaSlabMapper& ProcessCudaSlabMapper() {
  static CudaSlabMapper* const mapper = new CudaSlabMapper();
  return *mapper;
}

}  // namespace tensorbroker::client_internal
