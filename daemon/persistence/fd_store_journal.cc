#include "daemon/persistence/fd_store_journal.h"

#include "absl/strings/str_cat.h"
#include "daemon/base/log.h"
#include "daemon/memory/memfd_segment.h"
#include "daemon/persistence/tensor_record.h"

namespace tensorbroker::daemon {
namespace {

void WarnIfNotStored(const absl::Status& status, const std::string& what) {
  if (!status.ok()) {
    Log(LogLevel::kWarning, what, " will not survive a restart: ", status.message());
  }
}

void WarnIfNotRemoved(const absl::Status& status, const std::string& what) {
  if (!status.ok()) {
    Log(LogLevel::kWarning, what,
        " could not be dropped from the descriptor store and may come "
        "back after a restart: ",
        status.message());
  }
}

}  // namespace

std::string SegmentFdName(const std::string& segment) { return "s-" + segment; }

std::string CudaSlabFdName(const std::string& slab) { return "g-" + slab; }

std::string RecordFdName(uint64_t version) { return absl::StrCat("r-", version); }

void FdStoreJournal::SegmentCreated(const MemfdSegment& segment) {
  if (stopped()) return;
  WarnIfNotStored(store_.Store(SegmentFdName(segment.name()), segment.read_write_fd()),
                  absl::StrCat("segment ", segment.name()));
}

void FdStoreJournal::SegmentRemoved(const std::string& segment) {
  if (stopped()) return;
  WarnIfNotRemoved(store_.Remove(SegmentFdName(segment)), absl::StrCat("segment ", segment));
}

void FdStoreJournal::CudaSlabCreated(const std::string& slab, int fd) {
  if (stopped()) return;
  WarnIfNotStored(store_.Store(CudaSlabFdName(slab), fd), absl::StrCat("CUDA slab ", slab));
}

void FdStoreJournal::CudaSlabRemoved(const std::string& slab) {
  if (stopped()) return;
  WarnIfNotRemoved(store_.Remove(CudaSlabFdName(slab)), absl::StrCat("CUDA slab ", slab));
}

void FdStoreJournal::TensorPublished(const JournaledTensor& tensor) {
  if (stopped()) return;
  const v1::TensorRecord record = TensorRecordOf(tensor);
  const std::string what =
      absl::StrCat("'", LogSafe(record.info().name()), "' version ", record.info().version());
  auto fd = WriteTensorRecord(record);
  if (!fd.ok()) {
    WarnIfNotStored(fd.status(), what);
    return;
  }
  // The service manager keeps its own copy of the record; ours closes here.
  WarnIfNotStored(store_.Store(RecordFdName(record.info().version()), fd->get()), what);
}

void FdStoreJournal::TensorUnpublished(uint64_t version) {
  if (stopped()) return;
  WarnIfNotRemoved(store_.Remove(RecordFdName(version)),
                   absl::StrCat("the record of version ", version));
}

}  // namespace tensorbroker::daemon
