#include "client/src/region_mapper.h"

#include "absl/strings/str_cat.h"

namespace tensorbroker::client_internal {

absl::StatusOr<LocalRegion> MapRegion(Connection& connection, const v1::MemoryRegion& region) {
  if (region.offset() > region.segment_size() ||
      region.nbytes() > region.segment_size() - region.offset()) {
    return absl::DataLossError(absl::StrCat("daemon sent a region outside its segment: offset ",
                                            region.offset(), " nbytes ", region.nbytes(),
                                            " segment_size ", region.segment_size()));
  }
  const int32_t device_type = region.device().device_type();
  if (device_type != kDLCPU) {
    return absl::FailedPreconditionError(absl::StrCat(
        "region.device type ", device_type, " is not supported by this client (CPU only)"));
  }
  auto mapping =
      connection.mapper().Map(region.segment(), region.segment_size(), region.writable());
  if (!mapping.ok()) return mapping.status();
  connection.NoteSegment(region.segment());
  LocalRegion local;
  local.data = (*mapping)->data() + region.offset();
  local.keepalive = std::move(*mapping);
  local.device = {kDLCPU, 0};
  return local;
}

}  // namespace tensorbroker::client_internal
