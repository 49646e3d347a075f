#include "client/src/region_mapper.h"

#include <fcntl.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "client/src/cuda_slab_mapper.h"
#include "client/src/cuda_vmm_mapper.h"
#include "common/cuda_devices.h"
#include "common/cuda_runtime.h"

namespace tensorbroker::client_internal {
namespace {

// The cached mapping of the segment, fetching its descriptor again if this process has none.
absl::StatusOr<std::shared_ptr<const MappedSegment>> SegmentMapping(Connection& connection,
                                                                    const v1::TensorGrant& grant,
                                                                    MapMode mode) {
  const v1::MemoryRegion& region = grant.region();
  auto mapping = connection.mapper().Find(region.segment(), mode);
  if (mapping == nullptr) {
    if (absl::Status fetched = connection.FetchDescriptor(grant.lease_id()); !fetched.ok()) {
      return fetched;
    }
    mapping = connection.mapper().Find(region.segment(), mode);
  }
  if (mapping == nullptr || mapping->size() < region.segment_size()) {
    return absl::DataLossError(
        absl::StrCat("daemon sent no usable descriptor for segment ", region.segment()));
  }
  return mapping;
}

absl::StatusOr<LocalRegion> MapCpu(Connection& connection, const v1::TensorGrant& grant,
                                   bool pinned) {
  const v1::MemoryRegion& region = grant.region();
  auto mapping = SegmentMapping(connection, grant,
                                region.writable() ? MapMode::kReadWrite : MapMode::kReadOnly);
  if (!mapping.ok()) return mapping.status();
  if (pinned) {
    absl::Status status = (*mapping)->Pin();
    if (!status.ok() && !region.writable() && CudaUsable().ok()) {
      // Most GPUs cannot page-lock read-only memory (cudaDevAttrHostRegisterReadOnlySupported
      // is 0 on x86 without HMM), and the kernel gives this process no writable view of a
      // sealed tensor: pin a private copy-on-write view instead. Page-locking copies its pages
      // into this process (the tensor's bytes, no longer shared), so this costs memory.
      auto copy = connection.mapper().Find(region.segment(), MapMode::kPrivateWritable);
      if (copy == nullptr) {
        auto adopted = connection.mapper().Adopt(
            region.segment(), UniqueFd(::fcntl((*mapping)->fd(), F_DUPFD_CLOEXEC, 0)),
            region.segment_size(), MapMode::kPrivateWritable);
        if (adopted.ok()) copy = *adopted;
      }
      if (copy != nullptr && (status = copy->Pin()).ok()) mapping = std::move(copy);
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

// The slab's VMM mapping for the grant's access, fetching its descriptor again if this process
// has none.
absl::StatusOr<std::shared_ptr<const CudaMapping>> VmmMapping(Connection& connection,
                                                              const v1::TensorGrant& grant,
                                                              int ordinal) {
  const v1::MemoryRegion& region = grant.region();
  const CudaAccess access = region.writable() ? CudaAccess::kReadWrite : CudaAccess::kReadOnly;
  auto mapping = ProcessCudaVmmMapper().Map(region.segment(), ordinal, access);
  if (absl::IsNotFound(mapping.status())) {
    if (absl::Status fetched = connection.FetchDescriptor(grant.lease_id()); !fetched.ok()) {
      return fetched;
    }
    mapping = ProcessCudaVmmMapper().Map(region.segment(), ordinal, access);
  }
  if (absl::IsNotFound(mapping.status())) {
    return absl::DataLossError(
        absl::StrCat("daemon sent no descriptor for CUDA slab ", region.segment()));
  }
  if (mapping.ok() && (*mapping)->size() < region.segment_size()) {
    return absl::DataLossError(absl::StrCat("CUDA slab ", region.segment(), " maps ",
                                            (*mapping)->size(), " bytes, the region needs ",
                                            region.segment_size()));
  }
  return mapping;
}

absl::StatusOr<LocalRegion> MapCuda(Connection& connection, const v1::TensorGrant& grant) {
  const v1::MemoryRegion& region = grant.region();
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
  LocalRegion local;
  local.device = {kDLCUDA, *ordinal};
  if (region.cuda_handle() == v1::CUDA_HANDLE_VMM_DESCRIPTOR) {
    auto mapping = VmmMapping(connection, grant, *ordinal);
    if (!mapping.ok()) return mapping.status();
    local.data = (*mapping)->data() + region.offset();
    local.keepalive = std::move(*mapping);
    return local;
  }
  auto slab = ProcessCudaSlabMapper().Open(region.segment(), region.cuda_ipc_handle(), *ordinal,
                                           region.segment_size());
  if (!slab.ok()) return slab.status();
  local.data = (*slab)->data + region.offset();
  local.keepalive = std::move(*slab);
  return local;
}

}  // namespace

absl::StatusOr<LocalRegion> MapRegion(Connection& connection, const v1::TensorGrant& grant,
                                      bool pinned) {
  const v1::MemoryRegion& region = grant.region();
  if (region.offset() > region.segment_size() ||
      region.nbytes() > region.segment_size() - region.offset()) {
    return absl::DataLossError(absl::StrCat("daemon sent a region outside its segment: offset ",
                                            region.offset(), " nbytes ", region.nbytes(),
                                            " segment_size ", region.segment_size()));
  }
  switch (region.device().device_type()) {
    case kDLCPU:
      return MapCpu(connection, grant, pinned);
    case kDLCUDA:
      if (pinned) {
        return absl::InvalidArgumentError(
            "pinned: the tensor is in CUDA device memory; pinning applies to CPU tensors");
      }
      return MapCuda(connection, grant);
    default:
      return absl::FailedPreconditionError(
          absl::StrCat("region.device type ", region.device().device_type(),
                       " is not supported by this client (CPU and CUDA only)"));
  }
}

}  // namespace tensorbroker::client_internal
