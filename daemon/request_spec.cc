#include "daemon/request_spec.h"

#include "common/proto_convert.h"
#include "common/tensor_layout.h"
#include "daemon/request_device.h"

namespace tensorbroker::daemon {

// Validates the fields every tensor-making request shares and builds the store's spec.
absl::StatusOr<TensorSpec> MakeSpec(const std::string& name, const v1::DataType& dtype,
                                    const google::protobuf::RepeatedField<int64_t>& shape,
                                    const google::protobuf::RepeatedField<int64_t>& strides,
                                    uint64_t nbytes, bool is_mutable, bool replace,
                                    bool has_device, const v1::Device& device) {
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
  region->set_cuda_ipc_handle(grant.block.export_handle);
  out->set_lease_id(grant.lease_id);
}

absl::StatusOr<TensorSpec> MakeSpec(const v1::CreateRequest& request) {
  return MakeSpec(request.name(), request.dtype(), request.shape(), request.strides(),
                  request.nbytes(), request.mutable_(), request.replace(), request.has_device(),
                  request.device());
}

absl::StatusOr<TensorSpec> MakeSpec(const v1::PutRequest::Header& header) {
  return MakeSpec(header.name(), header.dtype(), header.shape(), {}, 0, header.mutable_(),
                  header.replace(), header.has_device(), header.device());
}

}  // namespace tensorbroker::daemon
