// tensorbroker::Client: thin translation between the public API (client.h) and the gRPC stub;
// the Connection owns transport and session, ExportedTensor the DLPack wrapping.
#include "tensorbroker/client.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "client/src/connection.h"
#include "client/src/exported_tensor.h"
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
};

namespace {

// Runs one unary call with the default deadline.
template <typename Request, typename Response, typename Method>
absl::Status Call(Connection& connection, Method method, const Request& request,
                  Response* response, std::chrono::milliseconds extra_deadline = {}) {
  grpc::ClientContext context;
  Connection::SetDeadline(&context, extra_deadline);
  return FromGrpcStatus((connection.stub().*method)(&context, request, response));
}

// What Put accepts: a CPU tensor the broker can store.
absl::Status ValidateSource(const DLTensor& tensor) {
  if (tensor.device.device_type != kDLCPU && tensor.device.device_type != kDLCUDAHost) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor.device (type=", tensor.device.device_type, ") is not CPU memory"));
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

}  // namespace

std::string DefaultSocketPath() { return ResolveDefaultSocketPath(); }

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
  Connection& connection = *impl_->connection;
  v1::CreateRequest request;
  request.set_session_id(connection.session_id());
  request.set_name(name);
  ToProto(dtype, request.mutable_dtype());
  request.mutable_shape()->Assign(shape.begin(), shape.end());
  request.mutable_strides()->Assign(options.strides.begin(), options.strides.end());
  request.set_mutable_(options.is_mutable);
  request.set_replace(options.replace);
  v1::TensorGrant grant;
  if (absl::Status s = Call(connection, &v1::Broker::Stub::Create, request, &grant); !s.ok()) {
    return s;
  }
  return client_internal::ExportVersioned(impl_->connection, grant);
}

absl::StatusOr<TensorInfo> Client::Seal(const std::string& name) {
  v1::SealRequest request;
  request.set_session_id(impl_->connection->session_id());
  request.set_name(name);
  v1::TensorInfo info;
  if (absl::Status s = Call(*impl_->connection, &v1::Broker::Stub::Seal, request, &info);
      !s.ok()) {
    return s;
  }
  return FromProto(info);
}

absl::Status Client::Abort(const std::string& name) {
  v1::AbortRequest request;
  request.set_session_id(impl_->connection->session_id());
  request.set_name(name);
  v1::Empty response;
  return Call(*impl_->connection, &v1::Broker::Stub::Abort, request, &response);
}

absl::StatusOr<TensorInfo> Client::Put(const std::string& name, const DLTensor& tensor,
                                       const PutOptions& options) {
  if (absl::Status s = ValidateSource(tensor); !s.ok()) return s;
  // One copy, straight into the broker's shared memory: Create, copy, Seal.
  CreateOptions create;
  create.is_mutable = options.is_mutable;
  create.replace = options.replace;
  std::vector<int64_t> shape(tensor.shape, tensor.shape + tensor.ndim);
  auto target = Create(name, shape, tensor.dtype, create);
  if (!target.ok()) return target.status();
  TensorPtr writable(*target);
  CopyToCompact(tensor, static_cast<uint8_t*>(writable->dl_tensor.data));
  writable.reset();  // our lease ends before Seal: the caller holds none afterwards
  auto sealed = Seal(name);
  if (!sealed.ok()) (void)Abort(name);
  return sealed;
}

namespace {

// A Get on the wire: the grant (and the lease it carries) for `name`.
absl::StatusOr<v1::TensorGrant> FetchGrant(Connection& connection, const std::string& name,
                                           std::chrono::milliseconds timeout) {
  v1::GetRequest request;
  request.set_session_id(connection.session_id());
  request.set_name(name);
  request.set_wait_ms(static_cast<uint32_t>(
      std::clamp<int64_t>(timeout.count(), 0, std::numeric_limits<uint32_t>::max())));
  v1::TensorGrant grant;
  if (absl::Status s = Call(connection, &v1::Broker::Stub::Get, request, &grant, timeout);
      !s.ok()) {
    return s;
  }
  return grant;
}

}  // namespace

absl::StatusOr<DLManagedTensorVersioned*> Client::Get(const std::string& name,
                                                      std::chrono::milliseconds timeout) {
  auto grant = FetchGrant(*impl_->connection, name, timeout);
  if (!grant.ok()) return grant.status();
  return client_internal::ExportVersioned(impl_->connection, *grant);
}

absl::StatusOr<DLManagedTensor*> Client::GetLegacy(const std::string& name,
                                                   std::chrono::milliseconds timeout) {
  auto grant = FetchGrant(*impl_->connection, name, timeout);
  if (!grant.ok()) return grant.status();
  return client_internal::ExportLegacy(impl_->connection, *grant);
}

absl::StatusOr<DLManagedTensorVersioned*> Client::Retain(const DLManagedTensorVersioned& tensor) {
  Connection& connection = *impl_->connection;
  auto lease_id = client_internal::LeaseOf(tensor, &connection);
  if (!lease_id.ok()) return lease_id.status();
  v1::RetainRequest request;
  request.set_session_id(connection.session_id());
  request.set_lease_id(*lease_id);
  v1::TensorGrant grant;
  if (absl::Status s = Call(connection, &v1::Broker::Stub::Retain, request, &grant); !s.ok()) {
    return s;
  }
  return client_internal::ExportVersioned(impl_->connection, grant);
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
  v1::ListResponse response;
  if (absl::Status s = Call(*impl_->connection, &v1::Broker::Stub::List, request, &response);
      !s.ok()) {
    return s;
  }
  std::vector<TensorInfo> out;
  out.reserve(static_cast<size_t>(response.tensors_size()));
  for (const v1::TensorInfo& info : response.tensors()) out.push_back(FromProto(info));
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
