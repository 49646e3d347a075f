#include "daemon/memory/adopted_claim.h"

#include "absl/strings/str_cat.h"

namespace tensorbroker::daemon {

absl::Status ClaimAdoptedBlock(const std::string& name, uint64_t segment_size, uint64_t offset,
                               uint64_t size, BlockKind kind, const std::string& sharing_key,
                               bool dedicated, OffsetAllocator* allocator, AdoptedClaim* claim) {
  if (claim->claimed &&
      (claim->kind != kind || claim->sharing_key != sharing_key || claim->dedicated || dedicated)) {
    return absl::InvalidArgumentError(
        absl::StrCat("segment ", name, " already holds a tensor it may not share with this one"));
  }
  if (!allocator->AllocateAt(offset, size)) {
    return absl::InvalidArgumentError(absl::StrCat("bytes [", offset, ", +", size,
                                                   ") are not free in segment ", name, " of ",
                                                   segment_size, " bytes"));
  }
  *claim = AdoptedClaim{true, kind, sharing_key, dedicated};
  return absl::OkStatus();
}

}  // namespace tensorbroker::daemon
