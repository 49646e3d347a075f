#include "client/src/fast_reads.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace tensorbroker::client_internal {

absl::StatusOr<std::shared_ptr<FastReads>> FastReads::Open(LocalChannel& channel) {
  v1::LocalRequest request;
  request.mutable_open_fast_reads();
  auto answer = channel.Call(std::move(request));
  if (!answer.ok()) return answer.status();
  if (!answer->reply.has_fast_reads() || answer->reply.descriptors_size() != 2 ||
      answer->fds.size() != 2) {
    return absl::DataLossError("open_fast_reads: the daemon did not send its two descriptors");
  }
  const v1::SegmentDescriptor& directory = answer->reply.descriptors(0);
  const v1::SegmentDescriptor& table = answer->reply.descriptors(1);
  auto directory_mapping = MappedSegment::Map(directory.segment(), std::move(answer->fds[0]),
                                              directory.size(), MapMode::kReadOnly);
  if (!directory_mapping.ok()) return directory_mapping.status();
  auto table_mapping = MappedSegment::Map(table.segment(), std::move(answer->fds[1]), table.size(),
                                          MapMode::kReadWrite);
  if (!table_mapping.ok()) return table_mapping.status();
  if (absl::Status s = DirectoryReader::Check((*directory_mapping)->data(), directory.size());
      !s.ok()) {
    return s;
  }
  if (absl::Status s = LeaseSlots::Check((*table_mapping)->data(), table.size()); !s.ok()) {
    return s;
  }
  return std::shared_ptr<FastReads>(
      new FastReads(*std::move(directory_mapping), *std::move(table_mapping)));
}

FastReads::FastReads(std::shared_ptr<const MappedSegment> directory,
                     std::shared_ptr<const MappedSegment> table)
    : directory_mapping_(std::move(directory)),
      table_mapping_(std::move(table)),
      directory_(directory_mapping_->data()),
      slots_(table_mapping_->data()) {}

uint32_t FastReads::taken() const {
  return static_cast<uint32_t>(HeldObjects(table_mapping_->data(), slots_.slots()).size());
}

}  // namespace tensorbroker::client_internal
