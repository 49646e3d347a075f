// Feeds: the bytes as the content of a sealed memfd, read with ReadTensorRecord
// (daemon/persistence/tensor_record.h); then, as a restarted daemon does, AdoptStoredDescriptors
// (daemon/persistence/adoption.h) of that memfd under "r-<its version>" beside two segments of the
// previous instance ("s-tb-old-0", "s-tb-old-1") into a fresh pool, and TensorStore::AdoptPublished
// and a Get of what was adopted. Asserts: a record that reads has format 1 and re-serializes within
// kMaxTensorRecordBytes; adoption takes the record or drops it (never both, never silently), takes
// it only if it validates like a client's request and lies inside a handed-over segment; one of the
// segments holds it and the others are freed; neither the record's name nor its segment's is
// dropped from the descriptor store (seen on a $NOTIFY_SOCKET of our own); the store accepts the
// adopted tensor and a Get returns it (adoption_support.h).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "daemon/persistence/adoption.h"
#include "daemon/persistence/fd_store.h"
#include "daemon/persistence/fd_store_journal.h"
#include "daemon/persistence/tensor_record.h"
#include "tests/fuzz/adoption_support.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/quiet_daemon_logs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tensorbroker;
  using namespace tensorbroker::daemon;
  fuzz::ServiceManagerStore();
  (void)fuzz::NotifyListener::Get().TakeRemoved();  // whatever came after the last input
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  UniqueFd fd = fuzz::RecordDescriptor(bytes);
  auto record = ReadTensorRecord(fd.get());
  uint64_t version = 1;
  if (record.ok()) {
    FUZZ_CHECK(record->format() == kTensorRecordFormat, "format %u", record->format());
    FUZZ_CHECK(record->ByteSizeLong() <= kMaxTensorRecordBytes, "record of %zu bytes",
               record->ByteSizeLong());
    version = record->info().version();
  }

  std::vector<NamedFd> handed;
  handed.push_back({"s-tb-old-0", fuzz::SegmentDescriptor(0)});
  handed.push_back({RecordFdName(version), std::move(fd)});
  handed.push_back({"s-tb-old-1", fuzz::SegmentDescriptor(1)});
  auto pool = fuzz::NewPool();
  Adoption adoption =
      AdoptStoredDescriptors(std::move(handed), {pool.get()}, fuzz::ServiceManagerStore());
  const std::vector<std::string> removed = fuzz::NotifyListener::Get().TakeRemoved();

  FUZZ_CHECK(adoption.others.empty(), "a segment or record left over");
  FUZZ_CHECK(adoption.tensors.size() + adoption.records_dropped == 1,
             "%zu adopted, %zu dropped of 1 record", adoption.tensors.size(),
             adoption.records_dropped);
  FUZZ_CHECK(record.ok() || adoption.tensors.empty(), "adopted a record that does not read");
  FUZZ_CHECK(adoption.segments == adoption.tensors.size() &&
                 adoption.segments + adoption.segments_freed == 2,
             "%zu segments used, %zu freed of 2", adoption.segments, adoption.segments_freed);
  if (!adoption.tensors.empty()) {
    FUZZ_CHECK(adoption.tensors[0].spec.name == record->info().name() &&
                   adoption.tensors[0].version == record->info().version(),
               "adopted another tensor than the record's");
  }
  fuzz::CheckAdopted(std::move(adoption), {{"tb-old-0", 64 << 10}, {"tb-old-1", 16 << 10}},
                     std::move(pool), removed);
  return 0;
}
