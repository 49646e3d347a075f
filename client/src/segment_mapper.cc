#include "client/src/segment_mapper.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <atomic>

#include "absl/strings/str_cat.h"
#include "common/cuda_runtime.h"

namespace tensorbroker::client_internal {
namespace {

std::atomic<size_t> pinned_mappings{0};

// Closes a descriptor on scope exit.
struct ScopedFd {
  int fd;
  ~ScopedFd() {
    if (fd >= 0) ::close(fd);
  }
};

absl::Status ErrnoStatus(int error, const std::string& what) {
  const std::string message = absl::StrCat(what, ": ", std::strerror(error));
  switch (error) {
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case ENOENT:
      return absl::NotFoundError(message);
    case ENOMEM:
    case EMFILE:
    case ENFILE:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace

absl::StatusOr<std::shared_ptr<const MappedSegment>> MappedSegment::Map(const std::string& name,
                                                                         uint64_t size,
                                                                         bool writable) {
  if (name.empty() || name.find('/') != std::string::npos) {
    return absl::InternalError(absl::StrCat("daemon sent a bad segment name '", name, "'"));
  }
  // shm_open sets FD_CLOEXEC.
  ScopedFd fd{::shm_open(("/" + name).c_str(), writable ? O_RDWR : O_RDONLY, 0)};
  if (fd.fd < 0) return ErrnoStatus(errno, absl::StrCat("opening segment /dev/shm/", name));
  struct stat st;
  if (::fstat(fd.fd, &st) != 0) return ErrnoStatus(errno, "fstat of segment " + name);
  if (static_cast<uint64_t>(st.st_size) < size) {
    return absl::DataLossError(absl::StrCat("segment ", name, " has ", st.st_size,
                                            " bytes, the daemon said ", size));
  }
  if (size == 0) {
    return std::shared_ptr<const MappedSegment>(new MappedSegment(nullptr, 0, writable));
  }
  // A writable mapping is a producer's, which fills the tensor: fault every page in now, in one
  // batch (MAP_POPULATE), instead of one fault per 4 KiB during the fill. Read-only mappings
  // stay lazy so a consumer that reads a little of a large segment pays only for that.
  void* p = ::mmap(nullptr, size, writable ? PROT_READ | PROT_WRITE : PROT_READ,
                   MAP_SHARED | (writable ? MAP_POPULATE : 0), fd.fd, 0);
  if (p == MAP_FAILED) return ErrnoStatus(errno, "mapping segment " + name);
  return std::shared_ptr<const MappedSegment>(
      new MappedSegment(static_cast<uint8_t*>(p), size, writable));
}

MappedSegment::~MappedSegment() {
  if (pinned_) {
    (void)CudaHostUnregister(data_);  // only fails if it was not registered
    --pinned_mappings;
  }
  if (data_ != nullptr) ::munmap(data_, size_);
}

absl::Status MappedSegment::Pin() const {
  std::lock_guard<std::mutex> lock(pin_mu_);
  if (pin_tried_) return pin_status_;
  pin_tried_ = true;
  pin_status_ = data_ == nullptr ? CudaUsable() : CudaHostRegister(data_, size_, !writable_);
  if (pin_status_.ok() && data_ != nullptr) {
    pinned_ = true;
    ++pinned_mappings;
  }
  return pin_status_;
}

size_t MappedSegment::pinned_count() { return pinned_mappings.load(); }

absl::StatusOr<std::shared_ptr<const MappedSegment>> SegmentMapper::Map(const std::string& name,
                                                                        uint64_t size,
                                                                        bool writable) {
  std::lock_guard<std::mutex> lock(mu_);
  auto key = std::make_pair(name, writable);
  if (auto it = cache_.find(key); it != cache_.end() && it->second->size() >= size) {
    return it->second;
  }
  auto mapped = MappedSegment::Map(name, size, writable);
  if (!mapped.ok()) return mapped.status();
  cache_[key] = *mapped;
  return *mapped;
}

void SegmentMapper::Forget(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  cache_.erase({name, false});
  cache_.erase({name, true});
}

SegmentMapper& ProcessSegmentMapper() {
  static SegmentMapper* const mapper = new SegmentMapper();
  return *mapper;
}

size_t SegmentMapper::cached() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cache_.size();
}

}  // namespace tensorbroker::client_internal
