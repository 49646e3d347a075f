#include "client/src/exported_tensor.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "client/src/region_mapper.h"
#include "common/cuda_runtime.h"
#include "common/proto_convert.h"

namespace tensorbroker::client_internal {
namespace {

// The manager_ctx of every exported tensor.
struct ExportContext {
  std::shared_ptr<Connection> connection;
  std::shared_ptr<const void> mapping;
  DLDevice device{kDLCPU, 0};  // of the mapping, as this process sees it
  uint64_t lease_id = 0;
  TensorInfo info;  // as the grant described the tensor
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  int64_t no_dims[1] = {0};  // shape and strides of a 0-d tensor point here
  DLManagedTensorVersioned versioned{};
  DLManagedTensor legacy{};

  ~ExportContext() {
    // Work the consumer queued on the tensor must finish before the daemon may reuse its
    // memory: frameworks call the deleter when the last host reference goes, kernels may still
    // be pending (on any stream, so the whole device is waited for).
    if (device.device_type == kDLCUDA) (void)CudaSynchronizeDevice(device.device_id);
    // Unmap before the lease ends: once it has, the daemon may free the memory, and freeing a
    // CUDA slab another process still has open is undefined behaviour.
    mapping.reset();
    if (connection != nullptr) connection->ReleaseLease(lease_id);
  }
};

void DeleteVersioned(DLManagedTensorVersioned* self) {
  delete static_cast<ExportContext*>(self->manager_ctx);
}

void DeleteLegacy(DLManagedTensor* self) { delete static_cast<ExportContext*>(self->manager_ctx); }

// Builds the context and fills `tensor` (shared by both ABIs).
absl::StatusOr<std::unique_ptr<ExportContext>> MakeContext(std::shared_ptr<Connection> connection,
                                                           const v1::TensorGrant& grant,
                                                           bool pinned,
                                                           DLTensor* (*pick)(ExportContext*)) {
  auto context = std::make_unique<ExportContext>();
  context->connection = std::move(connection);
  context->lease_id = grant.lease_id();  // released by ~ExportContext, also on failure below
  auto region = MapRegion(*context->connection, grant.region(), pinned);
  if (!region.ok()) return region.status();
  context->mapping = std::move(region->keepalive);
  context->device = region->device;
  const v1::TensorInfo& info = grant.info();
  context->info = FromProto(info);
  context->info.device = region->device;
  context->shape = ToVector(info.shape());
  context->strides = ToVector(info.strides());
  if (context->strides.size() != context->shape.size()) {
    return absl::DataLossError("daemon sent strides and shape of different lengths");
  }
  DLTensor* tensor = pick(context.get());
  tensor->data = region->data;
  tensor->device = region->device;
  tensor->ndim = static_cast<int32_t>(context->shape.size());
  tensor->dtype = FromProto(info.dtype());
  // Never NULL, also for 0-d tensors (DLPack 1.2 requires strides; some consumers read them).
  const bool scalar = context->shape.empty();
  tensor->shape = scalar ? context->no_dims : context->shape.data();
  tensor->strides = scalar ? context->no_dims : context->strides.data();
  tensor->byte_offset = 0;
  return context;
}

}  // namespace

absl::StatusOr<DLManagedTensorVersioned*> ExportVersioned(std::shared_ptr<Connection> connection,
                                                          const v1::TensorGrant& grant,
                                                          bool pinned) {
  auto context = MakeContext(std::move(connection), grant, pinned,
                             [](ExportContext* c) { return &c->versioned.dl_tensor; });
  if (!context.ok()) return context.status();
  DLManagedTensorVersioned* out = &(*context)->versioned;
  out->version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  out->manager_ctx = context->get();
  out->deleter = &DeleteVersioned;
  out->flags = grant.region().writable() ? 0 : DLPACK_FLAG_BITMASK_READ_ONLY;
  context->release();
  return out;
}

absl::StatusOr<DLManagedTensor*> ExportLegacy(std::shared_ptr<Connection> connection,
                                              const v1::TensorGrant& grant, bool pinned) {
  auto context = MakeContext(std::move(connection), grant, pinned,
                             [](ExportContext* c) { return &c->legacy.dl_tensor; });
  if (!context.ok()) return context.status();
  DLManagedTensor* out = &(*context)->legacy;
  out->manager_ctx = context->get();
  out->deleter = &DeleteLegacy;
  context->release();
  return out;
}

namespace {

absl::StatusOr<const ExportContext*> ContextOf(const DLManagedTensorVersioned& tensor,
                                               const Connection* connection) {
  if (tensor.deleter != &DeleteVersioned || tensor.manager_ctx == nullptr) {
    return absl::InvalidArgumentError("tensor was not made by a tensorbroker Client");
  }
  const auto* context = static_cast<const ExportContext*>(tensor.manager_ctx);
  if (context->connection.get() != connection) {
    return absl::InvalidArgumentError("tensor was made by another tensorbroker Client");
  }
  return context;
}

}  // namespace

absl::StatusOr<uint64_t> LeaseOf(const DLManagedTensorVersioned& tensor,
                                 const Connection* connection) {
  auto context = ContextOf(tensor, connection);
  if (!context.ok()) return context.status();
  return (*context)->lease_id;
}

absl::StatusOr<TensorInfo> InfoOf(const DLManagedTensorVersioned& tensor,
                                  const Connection* connection) {
  auto context = ContextOf(tensor, connection);
  if (!context.ok()) return context.status();
  return (*context)->info;
}

}  // namespace tensorbroker::client_internal
