// One POSIX shared-memory segment owned by the daemon, created through Boost.Interprocess.
//
// Ownership: the creator owns the name. The destructor unmaps and unlinks it; clients that
// still have it mapped keep their pages until they unmap. Move-only.
// Creation reserves every tmpfs page up front (posix_fallocate), so a full /dev/shm is a clear
// RESOURCE_EXHAUSTED now instead of a SIGBUS in some client later. Mode 0660, like the socket:
// the daemon's uid and group (the clients allowed to connect) can open it.
#ifndef TENSORBROKER_DAEMON_SHM_SEGMENT_H_
#define TENSORBROKER_DAEMON_SHM_SEGMENT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace tensorbroker::daemon {

class ShmSegment {
 public:
  // `name` is a POSIX shm name without the leading '/'.
  static absl::StatusOr<ShmSegment> Create(const std::string& name, uint64_t size);
  // Unlinks every /dev/shm entry whose name starts with `prefix`; returns how many.
  static int RemoveAllWithPrefix(const std::string& prefix);

  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ~ShmSegment();

  const std::string& name() const { return name_; }
  uint64_t size() const { return size_; }
  // The daemon's own read-write mapping (for Put and Read).
  uint8_t* data() const { return data_; }

 private:
  ShmSegment() = default;
  void Reset();

  std::string name_;
  uint64_t size_ = 0;
  uint8_t* data_ = nullptr;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_SHM_SEGMENT_H_
