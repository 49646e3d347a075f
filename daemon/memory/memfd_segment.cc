#include "daemon/memory/memfd_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/interprocess/exceptions.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "common/errno_status.h"

namespace tensorbroker::daemon {
namespace bip = boost::interprocess;
namespace {

// What fixes a segment's size for good; Create adds them, Adopt insists on them.
constexpr int kSizeSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

// What boost::interprocess::mapped_region maps: an open descriptor, as a MemoryMappable.
class DescriptorMappable {
 public:
  explicit DescriptorMappable(int fd) : fd_(fd) {}
  bip::mapping_handle_t get_mapping_handle() const {
    bip::mapping_handle_t handle;
    handle.handle = fd_;
    handle.is_xsi = false;
    return handle;
  }

 private:
  int fd_;
};

// MemAvailable from /proc/meminfo, in bytes; 0 when unknown.
uint64_t AvailableMemory() {
  std::FILE* meminfo = std::fopen("/proc/meminfo", "re");
  if (meminfo == nullptr) return 0;
  char line[256];
  unsigned long long kib = 0;
  while (std::fgets(line, sizeof(line), meminfo) != nullptr) {
    if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
  }
  std::fclose(meminfo);
  return static_cast<uint64_t>(kib) * 1024;
}

}  // namespace

absl::StatusOr<MemfdSegment> MemfdSegment::Create(const std::string& name, uint64_t size) {
  // Reserving more than the machine has would not fail cleanly (the OOM killer would answer):
  // refuse up front what cannot fit.
  if (const uint64_t available = AvailableMemory(); available != 0 && size > available) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a ", FormatByteSize(size), " segment does not fit in the ",
                     FormatByteSize(available), " of memory available"));
  }
  MemfdSegment segment;
  segment.name_ = name;
  segment.size_ = size;
  segment.read_write_.reset(::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!segment.read_write_.valid()) return ErrnoStatus(errno, "memfd_create");
  const int fd = segment.read_write_.get();
  if (::fchmod(fd, 0600) != 0) return ErrnoStatus(errno, "fchmod of a new segment");
  if (size > 0) {
    // Sizes the file and reserves every page; ENOSPC/ENOMEM when memory is short.
    if (int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(size)); rc != 0) {
      return ErrnoStatus(rc, absl::StrCat("reserving ", FormatByteSize(size), " for a segment"));
    }
  }
  if (::fcntl(fd, F_ADD_SEALS, kSizeSeals) != 0) {
    return ErrnoStatus(errno, "sealing the size of a new segment");
  }
  if (absl::Status views = segment.OpenViews(); !views.ok()) return views;
  return segment;
}

absl::StatusOr<MemfdSegment> MemfdSegment::Adopt(const std::string& name, UniqueFd read_write) {
  const int fd = read_write.get();
  auto refuse = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("segment ", name, ": ", why));
  };
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0) return refuse("not a memfd");
  if ((seals & kSizeSeals) != kSizeSeals) return refuse("its size is not sealed");
  const int access = ::fcntl(fd, F_GETFL);
  if (access < 0 || (access & O_ACCMODE) != O_RDWR) return refuse("not a read-write descriptor");
  struct stat st {};
  if (::fstat(fd, &st) != 0) return refuse(std::strerror(errno));
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  if (!S_ISREG(st.st_mode) || (st.st_mode & 07777) != 0600 || st.st_uid != ::geteuid()) {
    return refuse("not a mode-0600 file of this user");
  }
  if (st.st_size <= 0 || static_cast<uint64_t>(st.st_size) % page != 0) {
    return refuse(absl::StrCat("its size, ", st.st_size, " bytes, is not a whole number of pages"));
  }
  MemfdSegment segment;
  segment.name_ = name;
  segment.size_ = static_cast<uint64_t>(st.st_size);
  segment.read_write_ = std::move(read_write);
  if (absl::Status views = segment.OpenViews(); !views.ok()) return views;
  return segment;
}

absl::Status MemfdSegment::OpenViews() {
  // A second open file description, read-only: what consumers receive.
  const std::string self = absl::StrCat("/proc/self/fd/", read_write_.get());
  read_only_.reset(::open(self.c_str(), O_RDONLY | O_CLOEXEC));
  if (!read_only_.valid()) return ErrnoStatus(errno, "reopening a segment read-only");
  if (size_ > 0) {
    try {
      mapping_ = bip::mapped_region(DescriptorMappable(read_write_.get()), bip::read_write, 0,
                                    static_cast<std::size_t>(size_));
    } catch (const bip::interprocess_exception& e) {
      return absl::ResourceExhaustedError(
          absl::StrCat("mapping a ", FormatByteSize(size_), " segment: ", e.what()));
    }
  }
  return absl::OkStatus();
}

}  // namespace tensorbroker::daemon
