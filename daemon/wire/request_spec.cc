#include "daemon/wire/request_spec.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/tensor_layout.h"
#include "common/wire/proto_convert.h"
#include "daemon/wire/request_device.h"
#include "daemon/wire/store_proto.h"

namespace tensorbroker::daemon {

// Validates the fields every tensor-making request shares and builds the store's spec.
absl::StatusOr<TensorSpec> MakeSpec(const std::string& name, const v1::DataType& dtype,
                                    const google::protobuf::RepeatedField<int64_t>& shape,
                                    const google::protobuf::RepeatedField<int64_t>& strides,
                                    uint64_t nbytes, bool is_mutable, bool replace, bool has_device,
                                    const v1::Device& device) {
  if (absl::Status s = ValidateName(name); !s.ok()) return s;
  TensorSpec spec;
  auto where = ResolveRequestDevice(has_device, device);
  if (!where.ok()) return where.status();
  spec.device = *where;
  spec.name = name;
  spec.dtype = FromProto(dtype);
  spec.shape = ToVector(shape);
  auto layout = ComputeLayout(spec.shape, spec.dtype, ToVector(strides), nbytes);
  if (!layout.ok()) return layout.status();
  spec.strides = std::move(layout->strides);
  spec.nbytes = layout->nbytes;
  spec.is_mutable = is_mutable;
  spec.replace = replace;
  return spec;
}

void ToProto(const TensorGrant& grant, v1::TensorGrant* out) {
  ToProto(grant.info, out->mutable_info());
  v1::MemoryRegion* region = out->mutable_region();
  tensorbroker::ToProto(grant.block.device, region->mutable_device());
  region->set_segment(grant.block.segment);
  region->set_segment_size(grant.block.segment_size);
  region->set_offset(grant.block.offset);
  region->set_nbytes(grant.info.nbytes);
  region->set_writable(grant.writable);
  if (grant.block.device.device_type == kDLCUDA) {
    region->set_cuda_ipc_handle(grant.block.export_handle);
    region->set_cuda_handle(grant.block.read_only_fd >= 0 ? v1::CUDA_HANDLE_VMM_DESCRIPTOR
                                                          : v1::CUDA_HANDLE_LEGACY_IPC);
  }
  out->set_lease_id(grant.lease_id);
}

namespace {

// A request's keep: 0 means 1.
absl::StatusOr<TensorSpec> WithKeep(absl::StatusOr<TensorSpec> spec, uint32_t keep) {
  if (!spec.ok()) return spec;
  if (keep > kMaxKeep) {
    return absl::InvalidArgumentError(
        absl::StrCat("keep: ", keep, " versions is more than the most a name keeps, ", kMaxKeep));
  }
  spec->keep = std::max<uint32_t>(keep, 1);
  return spec;
}

}  // namespace

VersionWanted VersionWantedOf(const v1::GetRequest& request) {
  VersionWanted wanted;
  wanted.version = request.version();
  if (request.has_after_version()) wanted.after_version = request.after_version();
  wanted.oldest = request.oldest();
  return wanted;
}

absl::StatusOr<TensorSpec> MakeSpec(const v1::CreateRequest& request) {
  absl::StatusOr<TensorSpec> spec =
      WithKeep(MakeSpec(request.name(), request.dtype(), request.shape(), request.strides(),
                        request.nbytes(), request.mutable_(), request.replace(),
                        request.has_device(), request.device()),
               request.keep());
  if (spec.ok()) spec->ephemeral = request.ephemeral();
  return spec;
}

absl::StatusOr<TensorSpec> MakeSpec(const v1::PutRequest::Header& header) {
  return WithKeep(MakeSpec(header.name(), header.dtype(), header.shape(), {}, 0, header.mutable_(),
                           header.replace(), header.has_device(), header.device()),
                  header.keep());
}

}  // namespace tensorbroker::daemon
