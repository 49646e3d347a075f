// This process's mappings of the daemons' CPU segments, shared by every Client in the process
// (ProcessSegmentMapper). A segment reaches a process only as a descriptor the daemon sends on
// the local channel (read-only for sealed tensors, read-write for the creator of a pending
// tensor and holders of mutable ones); the mapper maps it once per access mode and reuses the
// mapping for every tensor in it. A mapping lives while the cache or any tensor holds it: the
// cache lets go when the daemon says the segment is gone (Forget), tensors when their deleter
// runs, so a freed segment's pages are never pinned by an idle mapping.
//
// Thread-safe.
#ifndef TENSORBROKER_CLIENT_SRC_SEGMENT_MAPPER_H_
#define TENSORBROKER_CLIENT_SRC_SEGMENT_MAPPER_H_

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "common/unique_fd.h"

namespace tensorbroker::client_internal {

// How a segment is mapped. kPrivateWritable is a copy-on-write view of a read-only descriptor,
// only for page-locking on GPUs that cannot page-lock read-only memory (see region_mapper.cc).
enum class MapMode { kReadOnly, kReadWrite, kPrivateWritable };

// One mmap of a whole segment and the descriptor it came from; munmap and close in the
// destructor. Held by shared_ptr. A mapping may also be page-locked for CUDA (Pin), once; it is
// unregistered before munmap.
class MappedSegment {
 public:
  // Maps `fd` (at least `size` bytes, checked with fstat). Takes the descriptor.
  static absl::StatusOr<std::shared_ptr<const MappedSegment>> Map(const std::string& name,
                                                                  UniqueFd fd, uint64_t size,
                                                                  MapMode mode);
  ~MappedSegment();
  MappedSegment(const MappedSegment&) = delete;
  MappedSegment& operator=(const MappedSegment&) = delete;

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  int fd() const { return fd_.get(); }

  // Registers the whole mapping with cudaHostRegister the first time; later calls return that
  // first outcome without asking the driver again. FAILED_PRECONDITION without a usable GPU.
  absl::Status Pin() const;
  // Mappings pinned in this process now.
  static size_t pinned_count();

 private:
  MappedSegment(UniqueFd fd, uint8_t* data, uint64_t size, bool read_only)
      : fd_(std::move(fd)), data_(data), size_(size), read_only_(read_only) {}
  UniqueFd fd_;
  uint8_t* data_;
  uint64_t size_;
  bool read_only_;
  mutable Mutex pin_mu_;
  mutable bool pin_tried_ ABSL_GUARDED_BY(pin_mu_) = false;
  mutable bool pinned_ ABSL_GUARDED_BY(pin_mu_) = false;
  mutable absl::Status pin_status_ ABSL_GUARDED_BY(pin_mu_);  // the first attempt's outcome
};

class SegmentMapper {
 public:
  // The cached mapping of `name` in `mode`, or null when this process has none.
  std::shared_ptr<const MappedSegment> Find(const std::string& name, MapMode mode) const;
  // Maps a descriptor the daemon sent and caches it (a mapping already cached wins and `fd`
  // is closed).
  absl::StatusOr<std::shared_ptr<const MappedSegment>> Adopt(const std::string& name, UniqueFd fd,
                                                             uint64_t size, MapMode mode);
  // Drops the cache's references to `name` (tensors still using it keep it mapped).
  void Forget(const std::string& name);
  size_t cached() const;

 private:
  friend SegmentMapper& ProcessSegmentMapper();
  SegmentMapper() = default;

  mutable Mutex mu_;
  // By segment name, then by MapMode (a lookup copies no name: it is on every get's path).
  using ByMode = std::array<std::shared_ptr<const MappedSegment>, 3>;
  std::map<std::string, ByMode, std::less<>> cache_ ABSL_GUARDED_BY(mu_);
};

// The one mapper of this process. Never destroyed, so tensors released during static
// destruction still find it.
SegmentMapper& ProcessSegmentMapper();

}  // namespace tensorbroker::client_internal

#endif  // TENSORBROKER_CLIENT_SRC_SEGMENT_MAPPER_H_
