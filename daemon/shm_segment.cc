#include "daemon/shm_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>

#include <boost/interprocess/permissions.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tensorbroker::daemon {
namespace bip = boost::interprocess;

absl::StatusOr<ShmSegment> ShmSegment::Create(const std::string& name, uint64_t size) {
  std::string error;
  int fd = -1;
  try {
    // Owner and group, like the socket: whoever may connect may map what it is granted (the
    // systemd unit's group `tensorbroker`); nobody else.
    bip::permissions owner_and_group(0660);
    bip::shared_memory_object shm(bip::create_only, name.c_str(), bip::read_write,
                                  owner_and_group);
    // Boost keeps the descriptor; take our own so the mapping outlives `shm`.
    fd = ::fcntl(shm.get_mapping_handle().handle, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) error = absl::StrCat("dup: ", std::strerror(errno));
  } catch (const bip::interprocess_exception& e) {
    return absl::InternalError(absl::StrCat("shared memory '", name, "': ", e.what()));
  }
  auto fail = [&](absl::Status status) {
    if (fd >= 0) ::close(fd);
    bip::shared_memory_object::remove(name.c_str());
    return status;
  };
  if (fd < 0) return fail(absl::InternalError(error));
  if (size > 0) {
    // Reserves the pages (and sizes the file); ENOSPC means /dev/shm is full.
    const int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(size));
    if (rc != 0) {
      const std::string what = absl::StrCat("reserving ", size, " bytes in /dev/shm for '", name,
                                            "': ", std::strerror(rc));
      return fail(rc == ENOSPC || rc == EFBIG ? absl::ResourceExhaustedError(what)
                                              : absl::InternalError(what));
    }
  }
  ShmSegment segment;
  segment.name_ = name;
  segment.size_ = size;
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      segment.name_.clear();
      return fail(absl::ResourceExhaustedError(
          absl::StrCat("mapping segment '", name, "' (", size, " bytes): ", std::strerror(errno))));
    }
    segment.data_ = static_cast<uint8_t*>(p);
  }
  ::close(fd);
  return segment;
}

int ShmSegment::RemoveAllWithPrefix(const std::string& prefix) {
  std::vector<std::string> names;
  if (DIR* dir = ::opendir("/dev/shm")) {
    while (dirent* entry = ::readdir(dir)) {
      if (absl::StartsWith(entry->d_name, prefix)) names.emplace_back(entry->d_name);
    }
    ::closedir(dir);
  }
  int removed = 0;
  for (const std::string& n : names) removed += bip::shared_memory_object::remove(n.c_str());
  return removed;
}

ShmSegment::ShmSegment(ShmSegment&& other) noexcept { *this = std::move(other); }

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    Reset();
    name_ = std::exchange(other.name_, {});
    size_ = std::exchange(other.size_, 0);
    data_ = std::exchange(other.data_, nullptr);
  }
  return *this;
}

ShmSegment::~ShmSegment() { Reset(); }

void ShmSegment::Reset() {
  if (data_ != nullptr) ::munmap(data_, size_);
  if (!name_.empty()) bip::shared_memory_object::remove(name_.c_str());
  data_ = nullptr;
  name_.clear();
  size_ = 0;
}

}  // namespace tensorbroker::daemon
