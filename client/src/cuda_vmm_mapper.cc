#include "client/src/cuda_vmm_mapper.h"

#include <cstdio>

#include "absl/strings/str_cat.h"

namespace tensorbroker::client_internal {

void CudaVmmMapper::Adopt(const std::string& name, UniqueFd fd, uint64_t size) {
  MutexLock lock(mu_);
  Entry& entry = entries_[name];
  if (entry.fd.valid()) return;  // `fd` closes here
  entry.fd = std::move(fd);
  entry.size = size;
}

absl::StatusOr<std::shared_ptr<const CudaMapping>> CudaVmmMapper::Map(const std::string& name,
                                                                      int ordinal,
                                                                      CudaAccess access) {
  MutexLock lock(mu_);
  auto it = entries_.find(name);
  if (it == entries_.end() || !it->second.fd.valid()) {
    return absl::NotFoundError(absl::StrCat("no descriptor of CUDA slab ", name, " here"));
  }
  std::shared_ptr<const CudaMapping>& cached =
      access == CudaAccess::kReadOnly ? it->second.read_only : it->second.read_write;
  if (cached != nullptr && cached->ordinal() == ordinal) return cached;
  auto mapping = MapLocked(it->second, ordinal, access);
  if (!mapping.ok()) return mapping.status();
  cached = *mapping;
  return cached;
}

absl::StatusOr<std::shared_ptr<const CudaMapping>> CudaVmmMapper::MapLocked(Entry& entry,
                                                                            int ordinal,
                                                                            CudaAccess access) {
  auto allocation = CudaAllocation::Import(entry.fd.get());
  if (!allocation.ok()) return allocation.status();
  bool try_read_only = false;
  if (access == CudaAccess::kReadOnly) {
    auto known = read_only_by_device_.find(ordinal);
    try_read_only = known == read_only_by_device_.end() || known->second;
  }
  if (try_read_only) {
    auto mapping = CudaMapping::Map(*allocation, entry.size, ordinal, CudaAccess::kReadOnly);
    if (mapping.ok()) {
      read_only_by_device_[ordinal] = true;
      return std::make_shared<const CudaMapping>(*std::move(mapping));
    }
    if (!absl::IsFailedPrecondition(mapping.status())) return mapping.status();
    // This device maps its memory read-write only: say so once, then map read-write.
    read_only_by_device_[ordinal] = false;
    std::fprintf(stderr,
                 "tensorbroker: CUDA device %d maps device memory read-write only (%s); sealed "
                 "tensors are mapped read-write and flagged read-only\n",
                 ordinal, std::string(mapping.status().message()).c_str());
  }
  auto mapping = CudaMapping::Map(*allocation, entry.size, ordinal, CudaAccess::kReadWrite);
  if (!mapping.ok()) return mapping.status();
  return std::make_shared<const CudaMapping>(*std::move(mapping));
}

void CudaVmmMapper::Forget(const std::string& name) {
  Entry gone;
  {
    MutexLock lock(mu_);
    auto it = entries_.find(name);
    if (it == entries_.end()) return;
    gone = std::move(it->second);
    entries_.erase(it);
  }
  // Unmapped (when no tensor holds them) and closed here, outside the lock.
}

size_t CudaVmmMapper::cached() const {
  MutexLock lock(mu_);
  return entries_.size();
}

int CudaVmmMapper::read_only_on(int ordinal) const {
  MutexLock lock(mu_);
  auto it = read_only_by_device_.find(ordinal);
  return it == read_only_by_device_.end() ? -1 : (it->second ? 1 : 0);
}

CudaVmmMapper& ProcessCudaVmmMapper() {
  static CudaVmmMapper* const mapper = new CudaVmmMapper();
  return *mapper;
}

}  // namespace tensorbroker::client_internal
