// This process's mappings of the daemons' shared-memory segments, shared by every Client in the
// process (ProcessSegmentMapper). Each segment is mapped once per access mode (read-only for sealed tensors, read-write for mutable or unsealed ones) and
// reused by every tensor in it. A mapping lives while the cache or any tensor holds it: the
// cache lets go when the daemon says the segment is gone (Forget), tensors when their deleter
// runs, so a freed segment's pages are never pinned by an idle mapping.
//
// Thread-safe.
#ifndef TENSORBROKER_CLIENT_SRC_SEGMENT_MAPPER_H_
#define TENSORBROKER_CLIENT_SRC_SEGMENT_MAPPER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "absl/status/statusor.h"

namespace tensorbroker::client_internal {

// One mmap of a whole segment; munmap in the destructor. Move-free (held by shared_ptr).
// A mapping may also be page-locked for CUDA (Pin), once; it is unregistered before munmap.
class MappedSegment {
 public:
  static absl::StatusOr<std::shared_ptr<const MappedSegment>> Map(const std::string& name,
                                                                  uint64_t size, bool writable);
  ~MappedSegment();
  MappedSegment(const MappedSegment&) = delete;
  MappedSegment& operator=(const MappedSegment&) = delete;

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

  // Registers the whole mapping with cudaHostRegister the first time; later calls return that
  // first outcome without asking the driver again (a read-only mapping most GPUs cannot pin
  // fails the same way each time; region_mapper.cc then pins a read-write one). The outcome is
  // forgotten with the mapping. FAILED_PRECONDITION without a usable GPU.
  absl::Status Pin() const;
  // Mappings pinned in this process now.
  static size_t pinned_count();

 private:
  MappedSegment(uint8_t* data, uint64_t size, bool writable)
      : data_(data), size_(size), writable_(writable) {}
  uint8_t* data_;
  uint64_t size_;
  bool writable_;
  mutable std::mutex pin_mu_;
  mutable bool pin_tried_ = false;     // guarded by pin_mu_
  mutable bool pinned_ = false;        // guarded by pin_mu_
  mutable absl::Status pin_status_;    // guarded by pin_mu_: the first attempt's outcome
};

class SegmentMapper {
 public:
  // The cached mapping of `name` (mapping it now if needed). `size` is the segment's size as
  // the daemon reported it; the mapping covers at least that much.
  absl::StatusOr<std::shared_ptr<const MappedSegment>> Map(const std::string& name,
                                                           uint64_t size, bool writable);
  // Drops the cache's reference to `name` (tensors still using it keep it mapped).
  void Forget(const std::string& name);
  size_t cached() const;

 private:
  friend SegmentMapper& ProcessSegmentMapper();
  SegmentMapper() = default;

  mutable std::mutex mu_;
  std::map<std::pair<std::string, bool>, std::shared_ptr<const MappedSegment>> cache_;
};

// The one mapper of this process. Never destroyed, so tensors released during static
// destruction still find it.
SegmentMapper& ProcessSegmentMapper();

}  // namespace tensorbroker::client_internal

#endif  // TENSORBROKER_CLIENT_SRC_SEGMENT_MAPPER_H_
