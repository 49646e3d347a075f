#include "client/src/segment_mapper.h"

#include <sys/mman.h>
#include <sys/stat.h>

#include <atomic>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "common/cuda_runtime.h"
#include "common/errno_status.h"

namespace tensorbroker::client_internal {
namespace {

std::atomic<size_t> pinned_mappings{0};

}  // namespace

absl::StatusOr<std::shared_ptr<const MappedSegment>> MappedSegment::Map(const std::string& name,
                                                                        UniqueFd fd, uint64_t size,
                                                                        MapMode mode) {
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, "fstat of segment " + name);
  if (static_cast<uint64_t>(st.st_size) < size) {
    return absl::DataLossError(
        absl::StrCat("segment ", name, " has ", st.st_size, " bytes, the daemon said ", size));
  }
  const bool read_only = mode == MapMode::kReadOnly;
  if (size == 0) {
    return std::shared_ptr<const MappedSegment>(
        new MappedSegment(std::move(fd), nullptr, 0, read_only));
  }
  // A read-write mapping is a producer's, which fills the tensor: fault every page in now, in
  // one batch (MAP_POPULATE), instead of one fault per 4 KiB during the fill. Read-only
  // mappings stay lazy so a consumer that reads a little of a large segment pays only for that.
  const int flags = mode == MapMode::kReadWrite  ? MAP_SHARED | MAP_POPULATE
                    : mode == MapMode::kReadOnly ? MAP_SHARED
                                                 : MAP_PRIVATE;
  void* p =
      ::mmap(nullptr, size, read_only ? PROT_READ : PROT_READ | PROT_WRITE, flags, fd.get(), 0);
  if (p == MAP_FAILED) return ErrnoStatus(errno, "mapping segment " + name);
  return std::shared_ptr<const MappedSegment>(
      new MappedSegment(std::move(fd), static_cast<uint8_t*>(p), size, read_only));
}

MappedSegment::~MappedSegment() {
  if (pinned_) {
    (void)CudaHostUnregister(data_);  // only fails if it was not registered
    --pinned_mappings;
  }
  if (data_ != nullptr) ::munmap(data_, size_);
}

absl::Status MappedSegment::Pin() const {
  MutexLock lock(pin_mu_);
  if (pin_tried_) return pin_status_;
  pin_tried_ = true;
  pin_status_ = data_ == nullptr ? CudaUsable() : CudaHostRegister(data_, size_, read_only_);
  if (pin_status_.ok() && data_ != nullptr) {
    pinned_ = true;
    ++pinned_mappings;
  }
  return pin_status_;
}

size_t MappedSegment::pinned_count() { return pinned_mappings.load(); }

std::shared_ptr<const MappedSegment> SegmentMapper::Find(const std::string& name,
                                                         MapMode mode) const {
  MutexLock lock(mu_);
  auto it = cache_.find(name);
  return it == cache_.end() ? nullptr : it->second[static_cast<size_t>(mode)];
}

absl::StatusOr<std::shared_ptr<const MappedSegment>> SegmentMapper::Adopt(const std::string& name,
                                                                          UniqueFd fd,
                                                                          uint64_t size,
                                                                          MapMode mode) {
  if (auto cached = Find(name, mode); cached != nullptr && cached->size() >= size) return cached;
  auto mapped = MappedSegment::Map(name, std::move(fd), size, mode);
  if (!mapped.ok()) return mapped.status();
  MutexLock lock(mu_);
  auto& slot = cache_[name][static_cast<size_t>(mode)];
  if (slot == nullptr || slot->size() < size) slot = *mapped;
  return slot;
}

void SegmentMapper::Forget(const std::string& name) {
  MutexLock lock(mu_);
  cache_.erase(name);
}

SegmentMapper& ProcessSegmentMapper() {
  static SegmentMapper* const mapper = new SegmentMapper();
  return *mapper;
}

size_t SegmentMapper::cached() const {
  MutexLock lock(mu_);
  size_t mappings = 0;
  for (const auto& [name, by_mode] : cache_) {
    for (const auto& mapping : by_mode) mappings += mapping != nullptr ? 1 : 0;
  }
  return mappings;
}

}  // namespace tensorbroker::client_internal
