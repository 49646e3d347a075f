// tensorbroker::Client: thin translation between the public API (client.h) and the gRPC stub;
// the Connection owns transport and session, ExportedTensor the DLPack wrapping.
#include "tensorbroker/client.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/src/cancel_scope.h"
#include "client/src/connection.h"
#include "client/src/cuda_slab_mapper.h"
#include "client/src/cuda_vmm_mapper.h"
#include "client/src/exported_tensor.h"
#include "client/src/fork_guard.h"
#include "client/src/segment_mapper.h"
#include "client/src/watch_stream.h"
#include "common/cuda_devices.h"
#include "common/cuda_runtime.h"
#include "common/mutex.h"
#include "common/socket_path.h"
#include "common/strided_copy.h"
#include "common/tensor_layout.h"
#include "common/wire/grpc_status.h"
#include "common/wire/proto_convert.h"
#include "tensorbroker/dtype_names.h"

namespace tensorbroker {

using client_internal::Connection;

namespace {

absl::Status StatusOf(const absl::Status& status) { return status; }
template <typename T>
absl::Status StatusOf(const absl::StatusOr<T>& result) {
  return result.status();
}

uint64_t NextClientId() {
  static std::atomic<uint64_t> next{1};
  return next++;
}

}  // namespace

// Hidden, as nested classes of an exported class are not by default (export.h).
class TENSORBROKER_HIDDEN Client::Impl {
 public:
  using ConnectionPtr = std::shared_ptr<Connection>;

  Impl(ConnectionPtr connection, ConnectOptions options, uint64_t id)
      : id(id), options_(std::move(options)), connection_(std::move(connection)) {
    options_.socket_path = connection_->socket_path();
  }
  const uint64_t id;  // Connection::client_id() of every connection this client makes
  const std::string& socket_path() const { return options_.socket_path; }

  // The connection calls go to now.
  ConnectionPtr Current() {
    MutexLock lock(mu_);
    return connection_;
  }

  // Runs `call` on the current connection; when it fails with UNAVAILABLE and the daemon went
  // away (Connection), reconnects and runs it once more on the new connection. An UNAVAILABLE
  // the daemon answered itself (a peer it could not fetch from) is returned as it is.
  template <typename Call>
  auto Run(const Call& call) -> decltype(call(std::declval<const ConnectionPtr&>())) {
    if (absl::Status here = client_internal::UsableHere(); !here.ok()) return here;
    ConnectionPtr connection = Current();
    // A session the daemon ended already: reconnect first (calls without a session would
    // otherwise reach a new daemon without this client's leases being taken again).
    if (connection->session_ended() && options_.reconnect_timeout.count() > 0) {
      auto fresh = Reconnect(connection);
      if (!fresh.ok()) return fresh.status();  // waited reconnect_timeout already
      connection = *std::move(fresh);
    }
    auto result = call(connection);
    if (!absl::IsUnavailable(StatusOf(result)) || connection->Answers()) return result;
    auto fresh = Reconnect(connection);
    if (!fresh.ok()) return fresh.status();
    return call(*fresh);
  }

  // `failed`'s daemon is gone: a new connection (unless another thread made one already),
  // waiting up to reconnect_timeout for a daemon to answer; what this process holds through
  // `failed` is leased again on it. UNAVAILABLE when none answers in time.
  absl::StatusOr<ConnectionPtr> Reconnect(const ConnectionPtr& failed);

  // Where each tensor this client created and has not sealed or aborted lives, so Seal knows
  // what CUDA work to wait for.
  void NotePending(const std::string& name, DLDevice device) {
    MutexLock lock(mu_);
    pending_[name] = device;
  }
  std::optional<DLDevice> PendingDevice(const std::string& name) {
    MutexLock lock(mu_);
    auto it = pending_.find(name);
    if (it == pending_.end()) return std::nullopt;
    return it->second;
  }
  void ForgetPending(const std::string& name) {
    MutexLock lock(mu_);
    pending_.erase(name);
  }

 private:
  ConnectOptions options_;
  Mutex reconnect_mu_ ABSL_ACQUIRED_BEFORE(mu_);  // one reconnection at a time
  Mutex mu_;
  ConnectionPtr connection_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, DLDevice> pending_ ABSL_GUARDED_BY(mu_);
};

namespace {

// Runs one unary gRPC call with the default deadline, after the daemon has taken this client's
// queued releases (so that Stat, List and Stats see them); once more after a reconnection if
// the daemon went away.
template <typename Request, typename Response, typename Method>
absl::Status Call(Client::Impl& impl, Method method, const Request& request, Response* response,
                  std::chrono::milliseconds extra_deadline = {}) {
  return impl.Run([&](const std::shared_ptr<Connection>& connection) {
    (void)connection->local().Sync();  // if the daemon is gone, the call below says so
    grpc::ClientContext context;
    Connection::SetDeadline(&context, extra_deadline);
    return FromGrpcStatus((connection->stub().*method)(&context, request, response));
  });
}

// What Put accepts: a CPU, pinned or CUDA tensor the broker can store.
absl::Status ValidateSource(const DLTensor& tensor) {
  const DLDeviceType type = tensor.device.device_type;
  if (type != kDLCPU && type != kDLCUDAHost && type != kDLCUDA) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor.device (type=", type, ") is neither CPU nor CUDA memory"));
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

// A Seal is not made again after a reconnection: the tensor it would seal was pending, and
// pending tensors do not survive the daemon.
absl::StatusOr<TensorInfo> SealOnWire(Client::Impl& impl, const std::string& name) {
  v1::LocalRequest request;
  request.mutable_seal()->set_name(name);
  std::shared_ptr<Connection> connection = impl.Current();
  auto answer = connection->local().Call(std::move(request));
  if (absl::IsUnavailable(answer.status())) {
    (void)impl.Reconnect(connection);  // for the calls that follow
    return absl::AbortedError(absl::StrCat(
        "Seal '", name,
        "': tensorbrokerd went away before it answered; a tensor not yet sealed "
        "does not survive a restart: Create (or Put) it again (Stat says whether this Seal was "
        "done first)"));
  }
  if (!answer.ok()) return answer.status();
  return FromProto(answer->reply.info());
}

// The grant of a local call's answer: its descriptors are mapped, its grant returned. If the
// descriptors cannot be mapped the lease is released.
absl::StatusOr<v1::TensorGrant> GrantOf(Connection& connection,
                                        absl::StatusOr<client_internal::LocalAnswer> answer) {
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

// A local call that grants a lease (GrantOf its answer).
absl::StatusOr<v1::TensorGrant> CallForGrant(Connection& connection, v1::LocalRequest request) {
  return GrantOf(connection, connection.local().Call(std::move(request)));
}

// A Get on the wire: the grant (and the lease it carries) for `name`. A `cancel` token
// cancelled before or during the wait makes it CANCELLED, with no waiter left in the daemon and
// the lease of a grant that came anyway released.
absl::StatusOr<v1::TensorGrant> FetchGrant(Connection& connection, const std::string& name,
                                           const GetOptions& options) {
  client_internal::CancelScope scope(options.cancel.get());
  if (absl::Status cancelled = scope.Check(name); !cancelled.ok()) return cancelled;
  v1::LocalRequest request;
  v1::GetRequest& get = *request.mutable_get();
  get.set_name(name);
  get.set_wait_ms(static_cast<uint32_t>(
      std::clamp<int64_t>(options.timeout.count(), 0, std::numeric_limits<uint32_t>::max())));
  get.set_version(options.version);
  if (options.after_version.has_value()) get.set_after_version(*options.after_version);
  get.set_oldest(options.oldest);
  client_internal::LocalChannel& channel = connection.local();
  auto answer = channel.Call(std::move(request), [&](uint64_t request_id) {
    // The hook runs at most until `scope` ends, within this call: the channel outlives it.
    scope.Arm([&channel, request_id] { channel.CancelWait(request_id); });
  });
  auto grant = GrantOf(connection, std::move(answer));
  if (grant.ok() && scope.cancelled()) {
    connection.ReleaseLease(grant->lease_id());
    return scope.Check(name);
  }
  return grant;
}

}  // namespace

absl::StatusOr<Client::Impl::ConnectionPtr> Client::Impl::Reconnect(const ConnectionPtr& failed) {
  MutexLock one_at_a_time(reconnect_mu_);
  if (ConnectionPtr current = Current(); current != failed) return current;
  if (options_.reconnect_timeout.count() <= 0) {
    return absl::UnavailableError(absl::StrCat("tensorbrokerd on ", options_.socket_path,
                                               " went away (reconnect_timeout is 0)"));
  }
  auto fresh = Connection::Open(options_.socket_path, options_.reconnect_timeout, id);
  if (!fresh.ok()) {
    return absl::Status(
        fresh.status().code(),
        absl::StrCat("tensorbrokerd went away and did not come back within ",
                     options_.reconnect_timeout.count(), " ms: ", fresh.status().message()));
  }
  if (options_.fast_reads) (*fresh)->OpenFastReads();
  client_internal::TakeLeasesAgain(*failed, *fresh,
                                   [](Connection& c, const std::string& name, uint64_t version) {
                                     GetOptions exactly;
                                     exactly.version = version;
                                     return FetchGrant(c, name, exactly);
                                   });
  MutexLock lock(mu_);
  connection_ = *fresh;
  return connection_;
}

std::string DefaultSocketPath() { return ResolveDefaultSocketPath(); }

ProcessMappings CurrentProcessMappings() {
  ProcessMappings mappings;
  mappings.cached_segments = client_internal::ProcessSegmentMapper().cached();
  mappings.open_cuda_slabs = client_internal::ProcessCudaSlabMapper().open();
  mappings.cached_cuda_slabs = client_internal::ProcessCudaVmmMapper().cached();
  mappings.pinned_segments = client_internal::MappedSegment::pinned_count();
  return mappings;
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const std::string& socket_path,
                                                        std::chrono::milliseconds timeout) {
  ConnectOptions options;
  options.socket_path = socket_path;
  options.timeout = timeout;
  return Connect(options);
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const ConnectOptions& options) {
  const std::string path =
      options.socket_path.empty() ? ResolveDefaultSocketPath() : options.socket_path;
  const uint64_t id = NextClientId();
  auto connection = Connection::Open(path, options.timeout, id);
  if (!connection.ok()) return connection.status();
  if (options.fast_reads) (*connection)->OpenFastReads();
  return std::unique_ptr<Client>(
      new Client(std::make_shared<Impl>(*std::move(connection), options, id)));
}

Client::Client(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

const std::string& Client::socket_path() const { return impl_->socket_path(); }

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
  request.set_keep(options.keep);
  request.set_ephemeral(options.ephemeral);
  for (const std::string& reader : options.readers) request.add_readers(reader);
  const DLDevice device = StorageDevice(options.device);
  if (device.device_type != kDLCPU) ToProto(device, request.mutable_device());
  if (device.device_type == kDLCUDA) {
    // The daemon is told the GPU's UUID (ordinals differ between processes): find ours.
    auto gpus = CudaDevices();
    if (!gpus.ok()) {
      return absl::Status(gpus.status().code(), absl::StrCat("device cuda:", device.device_id, ": ",
                                                             gpus.status().message()));
    }
    if (device.device_id < 0 || static_cast<size_t>(device.device_id) >= gpus->size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "device cuda:", device.device_id, ": this process sees ", gpus->size(), " GPU(s)"));
    }
  } else if (device.device_type != kDLCPU || device.device_id != 0) {
    return absl::InvalidArgumentError(absl::StrCat("device (type=", device.device_type,
                                                   ", id=", device.device_id,
                                                   "): the broker stores tensors on CPU or CUDA"));
  }
  const bool pinned = options.pinned || options.device.device_type == kDLCUDAHost;
  auto tensor = impl_->Run([&](const std::shared_ptr<Connection>& connection)
                               -> absl::StatusOr<DLManagedTensorVersioned*> {
    auto grant = CallForGrant(*connection, local);
    if (!grant.ok()) return grant.status();
    return client_internal::ExportVersioned(connection, *grant, pinned);
  });
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
      return absl::Status(synced.code(), absl::StrCat("Seal '", name,
                                                      "': waiting for the "
                                                      "producer's CUDA work: ",
                                                      synced.message()));
    }
  }
  auto sealed = SealOnWire(*impl_, name);
  if (sealed.ok()) impl_->ForgetPending(name);
  return sealed;
}

absl::Status Client::Abort(const std::string& name) {
  v1::LocalRequest request;
  request.mutable_abort()->set_name(name);
  impl_->ForgetPending(name);
  std::shared_ptr<Connection> connection = impl_->Current();
  absl::Status aborted = connection->local().Call(std::move(request)).status();
  if (!absl::IsUnavailable(aborted)) return aborted;
  // The daemon went away, and the tensor with it (pending tensors do not survive a restart).
  return impl_->Reconnect(connection).status();
}

absl::StatusOr<TensorInfo> Client::Put(const std::string& name, const DLTensor& tensor,
                                       const PutOptions& options) {
  if (absl::Status s = ValidateSource(tensor); !s.ok()) return s;
  // One copy, straight into the broker's shared memory: Create, copy, Seal.
  CreateOptions create;
  create.is_mutable = options.is_mutable;
  create.replace = options.replace;
  create.keep = options.keep;
  create.readers = options.readers;
  create.device = StorageDevice(options.device.value_or(
      tensor.device.device_type == kDLCUDA ? tensor.device : DLDevice{kDLCPU, 0}));
  std::vector<int64_t> shape(tensor.shape, tensor.shape + tensor.ndim);
  auto put_once = [&]() -> absl::StatusOr<TensorInfo> {
    auto target = Create(name, shape, tensor.dtype, create);
    if (!target.ok()) return target.status();
    TensorPtr writable(*target);
    // Complete on return (CUDA copies are synchronised), so Seal need not wait for anything.
    absl::Status copied =
        CopyToCompactOnDevice(tensor, writable->dl_tensor.data, writable->dl_tensor.device);
    writable.reset();  // our lease ends before Seal: the caller holds none afterwards
    if (!copied.ok()) {
      (void)Abort(name);
      return absl::Status(copied.code(), absl::StrCat("Put '", name, "': ", copied.message()));
    }
    impl_->ForgetPending(name);
    auto sealed = SealOnWire(*impl_, name);
    if (!sealed.ok()) (void)Abort(name);
    return sealed;
  };
  auto put = put_once();
  // ABORTED: the daemon went away between Create and Seal (SealOnWire); the source is still
  // here, so the whole Put is made again on the daemon that answers now.
  if (absl::IsAborted(put.status())) return put_once();
  return put;
}

absl::StatusOr<DLManagedTensorVersioned*> Client::Get(const std::string& name,
                                                      std::chrono::milliseconds timeout) {
  GetOptions options;
  options.timeout = timeout;
  return Get(name, options);
}

absl::StatusOr<DLManagedTensorVersioned*> Client::Get(const std::string& name,
                                                      const GetOptions& options) {
  // The current version, when the directory shows it in memory this process maps: no call.
  // (A cancelled token answers CANCELLED, as always: on the channel's path.)
  const bool from_directory = options.version == 0 && !options.oldest && !options.pinned &&
                              (options.cancel == nullptr || !options.cancel->cancelled());
  auto tensor = [&]() -> absl::StatusOr<DLManagedTensorVersioned*> {
    if (options.no_round_trip) {
      if (absl::Status here = client_internal::UsableHere(); !here.ok()) return here;
      if (from_directory) {
        if (auto got =
                client_internal::GetFromDirectory(impl_->Current(), name, options.after_version)) {
          return *got;
        }
      }
      return absl::FailedPreconditionError(absl::StrCat(
          "no_round_trip: name '", name,
          "' cannot be answered from this process's directory and mappings (not published, "
          "not readable, in a segment not mapped here yet, or no fast reads); a Get without "
          "no_round_trip asks the daemon"));
    }
    return impl_->Run([&](const std::shared_ptr<Connection>& connection)
                          -> absl::StatusOr<DLManagedTensorVersioned*> {
      if (from_directory) {
        if (auto got = client_internal::GetFromDirectory(connection, name, options.after_version)) {
          return *got;
        }
      }
      auto grant = FetchGrant(*connection, name, options);
      if (!grant.ok()) return grant.status();
      return client_internal::ExportVersioned(connection, *grant, options.pinned);
    });
  }();
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
  return impl_->Run(
      [&](const std::shared_ptr<Connection>& connection) -> absl::StatusOr<DLManagedTensor*> {
        GetOptions options;
        options.timeout = timeout;
        auto grant = FetchGrant(*connection, name, options);
        if (!grant.ok()) return grant.status();
        return client_internal::ExportLegacy(connection, *grant);
      });
}

absl::StatusOr<DLManagedTensorVersioned*> Client::Retain(const DLManagedTensorVersioned& tensor) {
  // Local: the new handle shares this client's lease and mapping (pinned if `tensor` is).
  return client_internal::ShareVersioned(tensor, impl_->id);
}

absl::StatusOr<TensorInfo> Client::Describe(const DLManagedTensorVersioned& tensor) const {
  return client_internal::InfoOf(tensor, impl_->id);
}

absl::StatusOr<std::shared_ptr<const TensorInfo>> Client::DescribeShared(
    const DLManagedTensorVersioned& tensor) const {
  return client_internal::SharedInfoOf(tensor, impl_->id);
}

absl::Status Client::Delete(const std::string& name) {
  v1::DeleteRequest request;
  request.set_name(name);
  v1::Empty response;
  return Call(*impl_, &v1::Broker::Stub::Delete, request, &response);
}

absl::StatusOr<std::vector<TensorInfo>> Client::List(const std::string& prefix) {
  v1::ListRequest request;
  request.set_prefix(prefix);
  std::vector<TensorInfo> out;
  do {
    v1::ListResponse response;
    if (absl::Status s = Call(*impl_, &v1::Broker::Stub::List, request, &response); !s.ok()) {
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
  if (absl::Status s = Call(*impl_, &v1::Broker::Stub::Stat, request, &info); !s.ok()) {
    return s;
  }
  return FromProto(info);
}

absl::StatusOr<uint64_t> Client::LatestVersion(const std::string& name) {
  if (absl::Status here = client_internal::UsableHere(); !here.ok()) return here;
  if (const auto& reads = impl_->Current()->fast_reads(); reads != nullptr) {
    const DirectoryReader::Version found = reads->VersionOf(name);
    switch (found.lookup) {
      case DirectoryReader::Lookup::kFound:
        if (found.version != 0) return found.version;
        [[fallthrough]];
      case DirectoryReader::Lookup::kAbsent:
        return absl::NotFoundError(absl::StrCat("name '", name, "' is not published"));
      case DirectoryReader::Lookup::kUnknown:
        break;  // the directory cannot say: ask
    }
  }
  auto info = Stat(name);
  if (!info.ok()) return info.status();
  return info->version;
}

bool Client::fast_reads() const { return impl_->Current()->fast_reads() != nullptr; }

absl::StatusOr<bool> Client::ChangedSince(const std::string& name, uint64_t version) {
  auto latest = LatestVersion(name);
  if (!latest.ok()) return latest.status();
  return *latest != version;
}

absl::StatusOr<std::unique_ptr<Watcher>> Client::Watch(const std::string& prefix,
                                                       const WatchOptions& options) {
  if (absl::Status s = ValidatePrefix(prefix); !s.ok()) return s;
  // The watcher outlives neither its client's reconnections nor needs the client to live on.
  auto reconnect = [weak = std::weak_ptr<Impl>(impl_)](
                       const Impl::ConnectionPtr& failed) -> absl::StatusOr<Impl::ConnectionPtr> {
    std::shared_ptr<Impl> impl = weak.lock();
    if (impl == nullptr) return absl::UnavailableError("tensorbrokerd went away (client closed)");
    return impl->Reconnect(failed);
  };
  return impl_->Run(
      [&](const Impl::ConnectionPtr& connection) -> absl::StatusOr<std::unique_ptr<Watcher>> {
        auto stream = client_internal::WatchStream::Open(connection, prefix, options, reconnect);
        if (!stream.ok()) return stream.status();
        return std::unique_ptr<Watcher>(*std::move(stream));
      });
}

absl::StatusOr<BrokerStats> Client::Stats() {
  v1::StatsRequest request;
  v1::BrokerStats response;
  if (absl::Status s = Call(*impl_, &v1::Broker::Stub::Stats, request, &response); !s.ok()) {
    return s;
  }
  return FromProto(response);
}

absl::Status Client::Ping() {
  v1::Empty request;
  v1::Empty response;
  return Call(*impl_, &v1::Broker::Stub::Ping, request, &response);
}

}  // namespace tensorbroker
