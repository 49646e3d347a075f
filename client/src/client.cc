// tensorbroker::Client: thin translation between the public API (client.h) and the gRPC stub;
// the Connection owns transport and session, ExportedTensor the DLPack wrapping.
#include "tensorbroker/client.h"

#include <algorithm>
#include <limits>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "client/src/connection.h"
#include "client/src/cuda_slab_mapper.h"
#include "client/src/exported_tensor.h"
#include "client/src/segment_mapper.h"
#include "common/cuda_devices.h"
#include "common/cuda_runtime.h"
#include "common/dtype_names.h"
#include "common/grpc_status.h"
#include "common/proto_convert.h"
#include "common/socket_path.h"
#include "common/strided_copy.h"
#include "common/tensor_layout.h"

namespace tensorbroker {

using client_internal::Connection;

class Client::Impl {
 public:
  explicit Impl(std::shared_ptr<Connection> connection) : connection(std::move(connection)) {}
  std::shared_ptr<Connection> connection;

  // Where each tensor this client created and has not sealed or aborted lives, so Seal knows
  // what CUDA work to wait for.
  void NotePending(const std::string& name, DLDevice device) {
    std::lock_guard<std::mutex> lock(mu);
    pending[name] = device;
  }
  std::optional<DLDevice> PendingDevice(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = pending.find(name);
    if (it == pending.end()) return std::nullopt;
    return it->second;
  }
  void ForgetPending(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu);
    pending.erase(name);
  }

 private:
  std::mutex mu;
  std::map<std::string, DLDevice> pending;
};

namespace {

// Runs one unary gRPC call with the default deadline, after the daemon has taken this client's
// queued releases (so that Stat, List and Stats see them).
template <typename Request, typename Response, typename Method>
absl::Status Call(Connection& connection, Method method, const Request& request,
                  Response* response, std::chrono::milliseconds extra_deadline = {}) {
  (void)connection.local().Sync();  // if the daemon is gone, the call below says so
  grpc::ClientContext context;
  Connection::SetDeadline(&context, extra_deadline);
  return FromGrpcStatus((connection.stub().*method)(&context, request, response));
}

// What Put accepts: a CPU, pinned or CUDA tensor the broker can store.
absl::Status ValidateSource(const DLTensor& tensor) {
  const DLDeviceType type = tensor.device.device_type;
  if (type != kDLCPU && type != kDLCUDAHost && type != kDLCUDA) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor.device (type=", type, ") is neither CPU nor CUDA memory"));
  }
  if (tensor.ndim < 0 || static_cast<size_t>(tensor.ndim) > kMaxDims) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor.ndim = ", tensor.ndim, "; must be 0..", kMaxDims));
  }
  if (tensor.ndim > 0 && tensor.shape == nullptr) {
    return absl::InvalidArgumentError("tensor.shape is NULL");
  }
  std::vector<int64_t> shape(tensor.shape, tensor.shape + tensor.ndim);
  auto layout = ComputeLayout(shape, tensor.dtype);
  if (!layout.ok()) return layout.status();
  if (layout->elements > 0 && tensor.data == nullptr) {
    return absl::InvalidArgumentError("tensor.data is NULL");
  }
  return absl::OkStatus();
}

// Where the broker puts a tensor: kDLCUDAHost is CPU memory mapped pinned.
DLDevice StorageDevice(DLDevice device) {
  return device.device_type == kDLCUDAHost ? DLDevice{kDLCPU, 0} : device;
}

absl::StatusOr<TensorInfo> SealOnWire(Connection& connection, const std::string& name) {
  v1::LocalRequest request;
  request.mutable_seal()->set_name(name);
  auto answer = connection.local().Call(std::move(request));
  if (!answer.ok()) return answer.status();
  return FromProto(answer->reply.info());
}

// A local call that grants a lease: its descriptors are mapped, its grant returned. If the
// descriptors cannot be mapped the lease is released.
absl::StatusOr<v1::TensorGrant> CallForGrant(Connection& connection, v1::LocalRequest request) {
  auto answer = connection.local().Call(std::move(request));
  if (!answer.ok()) return answer.status();
  if (!answer->reply.has_grant()) {
    return absl::DataLossError("tensorbrokerd answered without a grant");
  }
  if (absl::Status adopted = connection.AdoptDescriptors(&*answer); !adopted.ok()) {
    connection.ReleaseLease(answer->reply.grant().lease_id());
    return adopted;
  }
  return std::move(*answer->reply.mutable_grant());
}

}  // namespace

std::string DefaultSocketPath() { return ResolveDefaultSocketPath(); }

ProcessMappings CurrentProcessMappings() {
  ProcessMappings mappings;
  mappings.cached_segments = client_internal::ProcessSegmentMapper().cached();
  mappings.open_cuda_slabs = client_internal::ProcessCudaSlabMapper().open();
  mappings.pinned_segments = client_internal::MappedSegment::pinned_count();
  return mappings;
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const std::string& socket_path,
                                                        std::chrono::milliseconds timeout) {
  const std::string path = socket_path.empty() ? ResolveDefaultSocketPath() : socket_path;
  auto connection = Connection::Open(path, timeout);
  if (!connection.ok()) return connection.status();
  return std::unique_ptr<Client>(new Client(std::make_shared<Impl>(std::move(*connection))));
}

Client::Client(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

const std::string& Client::socket_path() const { return impl_->connection->socket_path(); }

absl::StatusOr<DLManagedTensorVersioned*> Client::Create(const std::string& name,
                                                         const std::vector<int64_t>& shape,
                                                         DLDataType dtype,
                                                         const CreateOptions& options) {
  v1::LocalRequest local;
  v1::CreateRequest& request = *local.mutable_create();
  request.set_name(name);
  ToProto(dtype, request.mutable_dtype());
  request.mutable_shape()->Assign(shape.begin(), shape.end());
  request.mutable_strides()->Assign(options.strides.begin(), options.strides.end());
  request.set_mutable_(options.is_mutable);
  request.set_replace(options.replace);
  for (const std::string& reader : options.readers) request.add_readers(reader);
  const DLDevice device = StorageDevice(options.device);
  if (device.device_type != kDLCPU) ToProto(device, request.mutable_device());
  if (device.device_type == kDLCUDA) {
    // The daemon is told the GPU's UUID (ordinals differ between processes): find ours.
    auto gpus = CudaDevices();
    if (!gpus.ok()) {
      return absl::Status(gpus.status().code(), absl::StrCat("device cuda:", device.device_id,
                                                             ": ", gpus.status().message()));
    }
    if (device.device_id < 0 || static_cast<size_t>(device.device_id) >= gpus->size()) {
      return absl::InvalidArgumentError(absl::StrCat("device cuda:", device.device_id,
                                                     ": this process sees ", gpus->size(),
                                                     " GPU(s)"));
    }
  } else if (device.device_type != kDLCPU || device.device_id != 0) {
    return absl::InvalidArgumentError(absl::StrCat("device (type=", device.device_type, ", id=",
                                                   device.device_id,
                                                   "): the broker stores tensors on CPU or CUDA"));
  }
  auto grant = CallForGrant(*impl_->connection, std::move(local));
  if (!grant.ok()) return grant.status();
  const bool pinned = options.pinned || options.device.device_type == kDLCUDAHost;
  auto tensor = client_internal::ExportVersioned(impl_->connection, *grant, pinned);
  if (!tensor.ok()) {
    (void)Abort(name);
    return tensor.status();
  }
  impl_->NotePending(name, (*tensor)->dl_tensor.device);
  return tensor;
}

absl::StatusOr<TensorInfo> Client::Seal(const std::string& name, const SealOptions& options) {
  // The producer's CUDA writes must be done before any consumer can see the tensor.
  if (std::optional<DLDevice> device = impl_->PendingDevice(name);
      device.has_value() && device->device_type == kDLCUDA) {
    absl::Status synced = options.cuda_stream.has_value()
                              ? CudaSynchronizeStream(*options.cuda_stream, device->device_id)
                              : CudaSynchronizeDevice(device->device_id);
    if (!synced.ok()) {
      return absl::Status(synced.code(), absl::StrCat("Seal '", name, "': waiting for the "
                                                      "producer's CUDA work: ", synced.message()));
    }
  }
  auto sealed = SealOnWire(*impl_->connection, name);
  if (sealed.ok()) impl_->ForgetPending(name);
  return sealed;
}

absl::Status Client::Abort(const std::string& name) {
  v1::LocalRequest request;
  request.mutable_abort()->set_name(name);
  impl_->ForgetPending(name);
  return impl_->connection->local().Call(std::move(request)).status();
}

absl::StatusOr<TensorInfo> Client::Put(const std::string& name, const DLTensor& tensor,
                                       const PutOptions& options) {
  if (absl::Status s = ValidateSource(tensor); !s.ok()) return s;
  // One copy, straight into the broker's shared memory: Create, copy, Seal.
  CreateOptions create;
  create.is_mutable = options.is_mutable;
  create.replace = options.replace;
  create.readers = options.readers;
  create.device = StorageDevice(options.device.value_or(
      tensor.device.device_type == kDLCUDA ? tensor.device : DLDevice{kDLCPU, 0}));
  std::vector<int64_t> shape(tensor.shape, tensor.shape + tensor.ndim);
  auto target = Create(name, shape, tensor.dtype, create);
  if (!target.ok()) return target.status();
  TensorPtr writable(*target);
  // Complete on return (CUDA copies are synchronised), so Seal need not wait for anything.
  absl::Status copied = CopyToCompactOnDevice(tensor, writable->dl_tensor.data,
                                              writable->dl_tensor.device);
  writable.reset();  // our lease ends before Seal: the caller holds none afterwards
  if (!copied.ok()) {
    (void)Abort(name);
    return absl::Status(copied.code(), absl::StrCat("Put '", name, "': ", copied.message()));
  }
  impl_->ForgetPending(name);
  auto sealed = SealOnWire(*impl_->connection, name);
  if (!sealed.ok()) (void)Abort(name);
  return sealed;
}

namespace {

// A Get on the wire: the grant (and the lease it carries) for `name`.
absl::StatusOr<v1::TensorGrant> FetchGrant(Connection& connection, const std::string& name,
                                           std::chrono::milliseconds timeout) {
  v1::LocalRequest request;
  v1::GetRequest& get = *request.mutable_get();
  get.set_name(name);
  get.set_wait_ms(static_cast<uint32_t>(
      std::clamp<int64_t>(timeout.count(), 0, std::numeric_limits<uint32_t>::max())));
  return CallForGrant(connection, std::move(request));
}

}  // namespace

absl::StatusOr<DLManagedTensorVersioned*> Client::Get(const std::string& name,
                                                      std::chrono::milliseconds timeout) {
  GetOptions options;
  options.timeout = timeout;
  return Get(name, options);
}

absl::StatusOr<DLManagedTensorVersioned*> Client::Get(const std::string& name,
                                                      const GetOptions& options) {
  auto grant = FetchGrant(*impl_->connection, name, options.timeout);
  if (!grant.ok()) return grant.status();
  auto tensor = client_internal::ExportVersioned(impl_->connection, *grant, options.pinned);
  if (!tensor.ok() || !options.device.has_value()) return tensor;
  const DLDevice is = StorageDevice((*tensor)->dl_tensor.device);
  const DLDevice wanted = StorageDevice(*options.device);
  if (is.device_type != wanted.device_type || is.device_id != wanted.device_id) {
    TensorPtr refused(*tensor);  // releases the lease
    return absl::FailedPreconditionError(absl::StrCat(
        "device: tensor '", name, "' is on ", DeviceName(is), ", not ", DeviceName(wanted),
        " (Get does not copy; Put a copy on the device you need)"));
  }
  return tensor;
}

absl::StatusOr<DLManagedTensor*> Client::GetLegacy(const std::string& name,
                                                   std::chrono::milliseconds timeout) {
  auto grant = FetchGrant(*impl_->connection, name, timeout);
  if (!grant.ok()) return grant.status();
  return client_internal::ExportLegacy(impl_->connection, *grant);
}

absl::StatusOr<DLManagedTensorVersioned*> Client::Retain(const DLManagedTensorVersioned& tensor) {
  // Local: the new handle shares this client's lease and mapping (pinned if `tensor` is).
  return client_internal::ShareVersioned(tensor, impl_->connection.get());
}

absl::StatusOr<TensorInfo> Client::Describe(const DLManagedTensorVersioned& tensor) const {
  return client_internal::InfoOf(tensor, impl_->connection.get());
}

absl::Status Client::Delete(const std::string& name) {
  v1::DeleteRequest request;
  request.set_name(name);
  v1::Empty response;
  return Call(*impl_->connection, &v1::Broker::Stub::Delete, request, &response);
}

absl::StatusOr<std::vector<TensorInfo>> Client::List(const std::string& prefix) {
  v1::ListRequest request;
  request.set_prefix(prefix);
  std::vector<TensorInfo> out;
  do {
    v1::ListResponse response;
    if (absl::Status s = Call(*impl_->connection, &v1::Broker::Stub::List, request, &response);
        !s.ok()) {
      return s;
    }
    for (const v1::TensorInfo& info : response.tensors()) out.push_back(FromProto(info));
    request.set_page_token(response.next_page_token());
  } while (!request.page_token().empty());
  return out;
}

absl::StatusOr<TensorInfo> Client::Stat(const std::string& name) {
  v1::StatRequest request;
  request.set_name(name);
  v1::TensorInfo info;
  if (absl::Status s = Call(*impl_->connection, &v1::Broker::Stub::Stat, request, &info);
      !s.ok()) {
    return s;
  }
  return FromProto(info);
}

absl::StatusOr<BrokerStats> Client::Stats() {
  v1::StatsRequest request;
  v1::BrokerStats response;
  if (absl::Status s = Call(*impl_->connection, &v1::Broker::Stub::Stats, request, &response);
      !s.ok()) {
    return s;
  }
  return FromProto(response);
}

absl::Status Client::Ping() {
  v1::Empty request;
  v1::Empty response;
  return Call(*impl_->connection, &v1::Broker::Stub::Ping, request, &response);
}

}  // namespace tensorbroker
