#include "client/src/region_mapper.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "client/src/cuda_slab_mapper.h"
#include "common/cuda_devices.h"
#include "common/cuda_runtime.h"

namespace tensorbroker::client_internal {
namespace {

absl::StatusOr<LocalRegion> MapCpu(Connection& connection, const v1::MemoryRegion& region,
                                   bool pinned) {
  auto mapping =
      connection.mapper().Map(region.segment(), region.segment_size(), region.writable());
  if (!mapping.ok()) return mapping.status();
  connection.NoteSegment(region.segment());
  if (pinned) {
    absl::Status status = (*mapping)->Pin();
    if (!status.ok() && !region.writable() && CudaUsable().ok()) {
      // Most GPUs cannot page-lock read-only memory (cudaDevAttrHostRegisterReadOnlySupported
      // is 0 on x86 without HMM): pin a read-write mapping of the segment instead. The tensor
      // still carries DLPack's read-only flag; only the page protection is lost.
      auto writable = connection.mapper().Map(region.segment(), region.segment_size(), true);
      if (writable.ok() && (status = (*writable)->Pin()).ok()) mapping = std::move(writable);
    }
    if (!status.ok()) {
      return absl::Status(status.code(), absl::StrCat("pinned: ", status.message()));
    }
  }
  LocalRegion local;
  local.data = (*mapping)->data() + region.offset();
  local.keepalive = std::move(*mapping);
  local.device = pinned ? DLDevice{kDLCUDAHost, 0} : DLDevice{kDLCPU, 0};
  return local;
}

absl::StatusOr<LocalRegion> MapCuda(const v1::MemoryRegion& region) {
  const std::string& uuid_bytes = region.device().uuid();
  if (uuid_bytes.size() != sizeof(CudaUuid)) {
    return absl::DataLossError(absl::StrCat("daemon sent a CUDA region whose device.uuid has ",
                                            uuid_bytes.size(), " bytes"));
  }
  CudaUuid uuid;
  std::copy(uuid_bytes.begin(), uuid_bytes.end(), uuid.begin());
  auto ordinal = CudaOrdinalOf(uuid);
  if (!ordinal.ok()) {
    auto devices = CudaDevices();
    return absl::FailedPreconditionError(absl::StrCat(
        "the tensor is on GPU ", CudaUuidText(uuid), ", which this process cannot use: ",
        devices.ok() ? "not among its CUDA_VISIBLE_DEVICES" : devices.status().message()));
  }
  auto slab = ProcessCudaSlabMapper().Open(region.segment(), region.cuda_ipc_handle(), *ordinal,
                                          region.segment_size());
  if (!slab.ok()) return slab.status();
  LocalRegion local;
  local.data = (*slab)->data + region.offset();
  local.keepalive = std::move(*slab);
  local.device = {kDLCUDA, *ordinal};
  return local;
}

}  // namespace

absl::StatusOr<LocalRegion> MapRegion(Connection& connection, const v1::MemoryRegion& region,
                                      bool pinned) {
  if (region.offset() > region.segment_size() ||
      region.nbytes() > region.segment_size() - region.offset()) {
    return absl::DataLossError(absl::StrCat("daemon sent a region outside its segment: offset ",
                                            region.offset(), " nbytes ", region.nbytes(),
                                            " segment_size ", region.segment_size()));
  }
  switch (region.device().device_type()) {
    case kDLCPU:
      return MapCpu(connection, region, pinned);
    case kDLCUDA:
      if (pinned) {
        return absl::InvalidArgumentError(
            "pinned: the tensor is in CUDA device memory; pinning applies to CPU tensors");
      }
      return MapCuda(region);
    default:
      return absl::FailedPreconditionError(
          absl::StrCat("region.device type ", region.device().device_type(),
                       " is not supported by this client (CPU and CUDA only)"));
  }
}

}  // namespace tensorbroker::client_internal
