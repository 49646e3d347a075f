// One CPU shared-memory segment owned by the daemon: an anonymous memfd, never a name.
//
// What the kernel enforces, for every process that ever holds a descriptor of it:
//   - its size is sealed at creation (F_SEAL_SHRINK | F_SEAL_GROW, then F_SEAL_SEAL): nobody
//     can truncate or grow it, so no mapping of it can ever SIGBUS;
//   - its mode is 0600 (fchmod): a process of another uid that holds the read-only descriptor
//     cannot reopen /proc/self/fd/N read-write (a memfd is born 0777);
//   - read_only_fd() is a separate open file description opened O_RDONLY (through
//     /proc/self/fd), so mmap(PROT_WRITE) and mprotect to writable fail on it.
// Every page is reserved up front (fallocate), so a full memory is RESOURCE_EXHAUSTED at
// Create instead of a SIGBUS in some client later. Nothing appears in /dev/shm.
//
// Layers: this class makes the descriptor (Linux memfd, which Boost.Interprocess does not
// know); the daemon's own read-write mapping of it is a boost::interprocess::mapped_region.
// Ownership: move-only; the destructor unmaps and closes both descriptors. Clients that hold
// descriptors or mappings keep the pages until they let go. Not thread-safe.
#ifndef TENSORBROKER_DAEMON_MEMFD_SEGMENT_H_
#define TENSORBROKER_DAEMON_MEMFD_SEGMENT_H_

#include <boost/interprocess/mapped_region.hpp>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/unique_fd.h"

namespace tensorbroker::daemon {

class MemfdSegment {
 public:
  // `name` is the segment's key on the wire and the memfd's label in /proc/<pid>/maps
  // ("/memfd:<name> (deleted)"). RESOURCE_EXHAUSTED when memory cannot hold `size` bytes.
  static absl::StatusOr<MemfdSegment> Create(const std::string& name, uint64_t size);
  // Takes over the read-write descriptor of a segment a previous instance created (kept by the
  // service manager or handed over): it must still be what Create made, a memfd of this uid,
  // mode 0600, its size sealed, a whole number of pages. INVALID_ARGUMENT saying what is not.
  static absl::StatusOr<MemfdSegment> Adopt(const std::string& name, UniqueFd read_write);

  MemfdSegment(MemfdSegment&&) = default;
  MemfdSegment& operator=(MemfdSegment&&) = default;
  MemfdSegment(const MemfdSegment&) = delete;
  MemfdSegment& operator=(const MemfdSegment&) = delete;
  ~MemfdSegment() = default;

  const std::string& name() const { return name_; }
  uint64_t size() const { return size_; }
  // The daemon's own read-write mapping (for Put and Read); null for a 0-byte segment.
  uint8_t* data() const { return static_cast<uint8_t*>(mapping_.get_address()); }
  // Borrowed descriptors, valid while this object lives; dup or send them, never close them.
  int read_write_fd() const { return read_write_.get(); }
  int read_only_fd() const { return read_only_.get(); }

 private:
  MemfdSegment() = default;
  // Opens the read-only descriptor and maps read_write_ (size_ bytes).
  absl::Status OpenViews();

  std::string name_;
  uint64_t size_ = 0;
  UniqueFd read_write_;
  UniqueFd read_only_;
  boost::interprocess::mapped_region mapping_;  // declared last: unmapped first
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_MEMFD_SEGMENT_H_
