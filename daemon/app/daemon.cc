#include "daemon/app/daemon.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <random>
#include <utility>

#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/byte_size.h"
#include "common/cuda_devices.h"
#include "common/prometheus_format.h"
#include "common/socket_path.h"
#include "common/wire/proto_convert.h"
#include "daemon/app/daemon_runner.h"
#include "daemon/base/descriptor_reserve.h"
#include "daemon/memory/cpu_segment_pool.h"
#include "daemon/persistence/handover.h"
#ifdef TENSORBROKER_HAVE_CUDA
#include "common/cuda_vmm.h"
#include "daemon/memory/cuda_slab_pool.h"
#endif
#include "daemon/app/service_notifier.h"
#include "daemon/base/log.h"
#include "daemon/metrics/metrics_interceptor.h"
#include "daemon/net/listen_address.h"
#include "daemon/net/socket_directory_setup.h"
#include "daemon/net/unix_listener.h"

namespace tensorbroker::daemon {
namespace {

// How long memory adopted at start stays out of reuse (cpu_segment_pool.h): a client's default
// reconnect timeout and then some.
constexpr absl::Duration kAdoptionGrace = absl::Seconds(60);

// 32 random bits, hex.
std::string InstanceId() {
  std::random_device random;
  return absl::StrCat(absl::Hex(random(), absl::kZeroPad8));
}

// Descriptors: two sockets' connections, each segment's two descriptors, gRPC's own. The soft
// limit (systemd's default is 1024) is raised toward the hard one to fit --max-connections.
void RaiseDescriptorLimit(uint32_t max_connections) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  const rlim_t wanted = static_cast<rlim_t>(max_connections) * 2 + 8192;
  if (limit.rlim_cur >= wanted) return;
  const rlim_t raised = std::min(wanted, limit.rlim_max);
  if (raised > limit.rlim_cur) {
    limit.rlim_cur = raised;
    (void)::setrlimit(RLIMIT_NOFILE, &limit);
  }
  if (raised < wanted) {
    Log(LogLevel::kWarning, "descriptor limit ", raised, " (hard) is below the ", wanted,
        " that --max-connections ", max_connections,
        " needs; raise LimitNOFILE= (the unit sets 65536)");
  }
}

// What the service manager handed over (socket activation, the descriptor store).
std::vector<NamedFd> HandedBySystemd() {
  auto listen_fds = TakeListenFds();
  if (listen_fds.ok()) return *std::move(listen_fds);
  Log(LogLevel::kWarning, "adoption: ", listen_fds.status().message(), "; adopting nothing");
  return {};
}

// --takeover: what the running daemon hands over, added to `handed`, but its lock, returned.
absl::StatusOr<UniqueFd> TakeOver(const std::string& socket_path, std::vector<NamedFd>* handed) {
  const absl::Time asked = absl::Now();
  auto taken = RequestTakeover(LocalChannelPath(socket_path), absl::Seconds(60));
  if (!taken.ok()) return taken.status();
  UniqueFd lock;
  for (NamedFd& fd : *taken) {
    if (fd.name == kHandedLockName) {
      lock = std::move(fd.fd);
    } else {
      handed->push_back(std::move(fd));
    }
  }
  Log(LogLevel::kNotice, "takeover: ", taken->size(), " descriptors handed over in ",
      absl::FormatDuration(absl::Now() - asked));
  return lock;
}

#ifdef TENSORBROKER_HAVE_CUDA
// The slab options of GPU `ordinal` for the handles asked for: VMM where the device has it with
// POSIX descriptors, else legacy CUDA IPC (logged).
CudaSlabPoolOptions CudaHandlesFor(int ordinal, CudaHandles wanted) {
  CudaSlabPoolOptions slabs;
  slabs.ordinal = ordinal;
  if (wanted != CudaHandles::kVmm) return slabs;
  auto vmm = QueryCudaVmm(ordinal);
  if (vmm.ok() && vmm->usable()) {
    slabs.handles = CudaHandles::kVmm;
    slabs.granularity = vmm->granularity;
    slabs.pooled_slab_bytes = RoundUp(slabs.pooled_slab_bytes, vmm->granularity);
    Log(LogLevel::kInfo, "CUDA device ", ordinal, ": ", DescribeCudaVmm(*vmm),
        "; slabs reach clients as descriptors");
    return slabs;
  }
  Log(LogLevel::kWarning, "CUDA device ", ordinal, ": --cuda-handles vmm: ",
      vmm.ok() ? DescribeCudaVmm(*vmm) : std::string(vmm.status().message()),
      "; this device keeps legacy CUDA IPC handles");
  return slabs;
}
#endif

// The CPU pool, then one pool per GPU this daemon serves, each GPU logged (or why there are
// none). `name_prefix` makes segment and slab names unique to this instance.
std::vector<std::unique_ptr<MemoryPool>> MakePools(const DaemonOptions& options,
                                                   const std::string& name_prefix,
                                                   PersistenceJournal* journal) {
  std::vector<std::unique_ptr<MemoryPool>> pools;
  CpuSegmentPoolOptions cpu;
  cpu.capacity_bytes = options.capacity_bytes;
  cpu.name_prefix = name_prefix;
  cpu.journal = journal;
  pools.push_back(std::make_unique<CpuSegmentPool>(cpu));
  auto gpus = CudaDevices();
  if (!gpus.ok()) {
    Log(LogLevel::kInfo, "CUDA: ", gpus.status().message(), "; serving CPU tensors only");
    return pools;
  }
  for (const CudaDevice& gpu : *gpus) {
    const uint64_t capacity = options.cuda_capacity_bytes.value_or(gpu.total_bytes / 2);
    Log(LogLevel::kInfo, "CUDA device ", gpu.ordinal, ": ", gpu.name, " ", CudaUuidText(gpu.uuid),
        " ", FormatByteSize(gpu.total_bytes),
        capacity == 0 ? "; not served (--cuda-capacity 0)"
                      : absl::StrCat("; serving up to ", FormatByteSize(capacity)));
#ifdef TENSORBROKER_HAVE_CUDA
    if (capacity == 0) continue;
    CudaSlabPoolOptions slabs = CudaHandlesFor(gpu.ordinal, options.cuda_handles);
    slabs.capacity_bytes = capacity;
    slabs.name_prefix = name_prefix;
    slabs.journal = journal;
    pools.push_back(std::make_unique<CudaSlabPool>(slabs));
#endif
  }
  return pools;
}

// The descriptors the service manager (listen_fds.h) or a daemon taken over (handover.h) handed
// over, adopted into `pools` (adoption.h), with a log line saying what came back. Those that are
// neither a segment, a slab nor a record (the socket unit's sockets) are left in
// Adoption::others.
Adoption AdoptHandedDescriptors(std::vector<NamedFd> handed,
                                const std::vector<std::unique_ptr<MemoryPool>>& pools,
                                const FdStore& fd_store) {
  if (handed.empty()) return Adoption{};
  std::vector<MemoryPool*> raw;
  for (const auto& pool : pools) raw.push_back(pool.get());
  Adoption adopted = AdoptStoredDescriptors(std::move(handed), raw, fd_store);
  if (adopted.tensors.empty() && adopted.segments_freed == 0 && adopted.records_dropped == 0) {
    return adopted;  // sockets only
  }
  Log(LogLevel::kNotice, "adopted ", adopted.tensors.size(), " tensors (",
      adopted.tensors.size() - adopted.cuda_tensors, " CPU, ", adopted.cuda_tensors, " CUDA; ",
      FormatByteSize(adopted.bytes), ") in ", adopted.segments,
      " segments and slabs from the previous instance; freed ", adopted.segments_freed,
      " no tensor was in; dropped ", adopted.records_dropped,
      " records; CUDA tensors survive only in VMM slabs (--cuda-handles vmm)");
  return adopted;
}

UniqueFd Duplicate(const UniqueFd& fd) { return UniqueFd(::fcntl(fd.get(), F_DUPFD_CLOEXEC, 0)); }

}  // namespace

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(const DaemonOptions& options) {
  // A directory someone else may write is no place for a socket that clients trust.
  if (absl::Status ready = PrepareSocketDirectory(options.socket_path); !ready.ok()) return ready;
  // Before a takeover's descriptors arrive, and adoption, which opens a second descriptor of
  // every segment handed over.
  RaiseDescriptorLimit(options.max_connections);
  std::vector<NamedFd> handed = HandedBySystemd();
  UniqueFd handed_lock;
  if (options.takeover) {
    auto taken = TakeOver(options.socket_path, &handed);
    if (!taken.ok()) return taken.status();
    handed_lock = *std::move(taken);
  }
  auto lock = options.takeover ? InstanceLock::Adopt(options.socket_path, std::move(handed_lock))
                               : InstanceLock::Acquire(options.socket_path);
  if (!lock.ok()) return lock.status();
  std::unique_ptr<Daemon> daemon(new Daemon(options, *std::move(lock)));
  if (!options.tls.empty()) {  // checked before anything is served: a bad file stops the start
    auto tls = LoadPeerTls(options.tls);
    if (!tls.ok()) return tls.status();
    daemon->peer_tls_ = *std::move(tls);
  }
  Adoption adopted = daemon->BuildStore(std::move(handed));
  if (absl::Status started = daemon->StartMetricsHttp(); !started.ok()) return started;
  if (absl::Status bound = daemon->TakeOrBindSockets(std::move(adopted.others)); !bound.ok()) {
    return bound;
  }
  if (absl::Status started = daemon->StartLocalChannel(); !started.ok()) return started;
  if (absl::Status started = daemon->StartGrpc(); !started.ok()) return started;
  if (absl::Status started = daemon->StartPeerListener(); !started.ok()) return started;
  daemon->AnnounceReady();
  return daemon;
}

Daemon::Daemon(const DaemonOptions& options, InstanceLock lock)
    : options_(options),
      lock_(std::move(lock)),
      policy_(options.access),
      fd_store_(FdStore::FromEnvironment()),
      operator_view_{static_cast<uint32_t>(::getuid()), {}, true, {}} {
  if (fd_store_.enabled()) journal_ = std::make_unique<FdStoreJournal>(fd_store_);
}

Adoption Daemon::BuildStore(std::vector<NamedFd> handed) {
  StoreOptions store_options;
  store_options.pending_timeout = options_.pending_timeout;
  store_options.quota_for = [this](uint32_t uid) { return policy_.QuotaFor(uid); };
  store_options.descriptors_to_spare = [](const char* what) {
    return CheckDescriptorsToSpare(what);
  };
  store_options.journal = journal_.get();
  store_options.watch_log = options_.watch_log;
  store_options.max_lease_tables_per_uid = options_.max_lease_tables_per_uid;
  if (!options_.remote.empty()) {  // the TLS files are there: the settings check says so
    peer_channels_ = std::make_unique<PeerChannels>(*peer_tls_);
    transfer_ = std::make_unique<GrpcTransfer>(peer_channels_.get(), options_.fetch_stall_timeout);
    fetcher_ =
        std::make_unique<ReplicaFetcher>(options_.remote, transfer_.get(), peer_channels_.get());
    store_options.remote = fetcher_.get();
  }
  // Versions keep increasing across restarts and takeovers without a counter kept anywhere:
  // this instance starts at the clock (microseconds), past the previous one's unless it
  // published over a million versions a second on average; adoption raises it past every
  // version adopted in any case.
  store_options.first_version = static_cast<uint64_t>(absl::ToUnixMicros(absl::Now()));
  // A fresh instance id in every name: a client that outlives this daemon must never mistake a
  // successor's segment (or slab) for one it has cached.
  const std::string prefix = SegmentPrefixFor(options_.socket_path);
  auto pools = MakePools(options_, absl::StrCat(prefix, InstanceId(), "-"), journal_.get());
  Adoption adopted = AdoptHandedDescriptors(std::move(handed), pools, fd_store_);
  store_ = std::make_unique<TensorStore>(std::move(pools), std::move(store_options));
  if (fetcher_ != nullptr) {
    fetcher_->Attach(store_.get());
    fetcher_stop_.fetcher = &fetcher_;
  }
  for (TensorStore::AdoptedTensor& tensor : adopted.tensors) {
    if (absl::Status taken = store_->AdoptPublished(std::move(tensor)); !taken.ok()) {
      Log(LogLevel::kWarning, "adoption: ", taken.message());
    }
  }
  // Times out waiting Gets, and expires pending tensors every tenth of the pending timeout.
  timer_ = std::make_unique<DeadlineTimer>();
  expiry_ = std::make_unique<PendingExpiry>(store_.get(), timer_.get(), options_.pending_timeout);
  // Clients of the previous instance reconnect within their reconnect timeout (30 s by default)
  // and lease what they still hold again; until then no adopted memory is reused.
  if (!adopted.tensors.empty()) {
    grace_timer_ = timer_->Schedule(absl::Now() + kAdoptionGrace, [this] {
      store_->EndAdoptionGrace();
      Log(LogLevel::kInfo, "adoption: grace period over; adopted memory may be reused");
    });
  }
  ServiceParts parts;
  parts.store = store_.get();
  parts.sessions = &sessions_;
  parts.metrics = &metrics_;
  parts.peers = &peers_;
  parts.policy = &policy_;
  parts.timer = timer_.get();
  parts.peer_traffic = &peer_traffic_;
  parts.pending_timeout = options_.pending_timeout;
  service_ = std::make_unique<BrokerService>(parts);
  return adopted;
}

// Bound before the socket serves, so that a bad --metrics-listen stops the start cleanly.
absl::Status Daemon::StartMetricsHttp() {
  if (options_.metrics_listen.empty()) return absl::OkStatus();
  auto started = MetricsHttpServer::Start(options_.metrics_listen, [this] {
    // The schema's one Prometheus writer, from the wire form (the public types).
    return PrometheusText(FromProto(service_->CurrentStats(operator_view_)));
  });
  if (!started.ok()) return started.status();
  metrics_http_ = *std::move(started);
  Log(LogLevel::kInfo, "metrics at http://", metrics_http_->bound_address(), "/metrics");
  return absl::OkStatus();
}

// The gRPC socket and the local channel's: the socket unit's when it handed them over (taken
// out of `handed`), bound here otherwise. Anything else handed over is closed, with a warning.
absl::Status Daemon::TakeOrBindSockets(std::vector<NamedFd> handed) {
  const std::string& socket_path = options_.socket_path;
  const std::string local_path = LocalChannelPath(socket_path);
  // The local channel first: a client that reaches the gRPC socket finds it there.
  auto local = TakeOrBindUnixListener(&handed, local_path, SOCK_SEQPACKET,
                                      "local channel (--socket + \".fd\")");
  if (!local.ok()) return local.status();
  socket_files_.Add(local_path, *local);
  auto grpc = TakeOrBindUnixListener(&handed, socket_path, SOCK_STREAM, "--socket");
  if (!grpc.ok()) return grpc.status();
  socket_files_.Add(socket_path, *grpc);
  for (const NamedFd& other : handed) {
    Log(LogLevel::kWarning, "descriptor '", LogSafe(other.name),
        "' handed over at start is neither a segment, a record, nor a socket for ", socket_path,
        " or ", local_path, "; closed");
  }
  if (grpc->inherited || local->inherited) {
    Log(LogLevel::kInfo, "socket activation: ", grpc->inherited ? "the gRPC socket" : "",
        grpc->inherited && local->inherited ? " and " : "",
        local->inherited ? "the local channel's socket" : "",
        " handed over by the service manager");
  }
  // The sockets a daemon taken over handed over are ours now.
  if (options_.takeover) socket_files_.ClaimAll();
  grpc_listener_ = Duplicate(grpc->fd);
  local_listener_ = Duplicate(local->fd);
  local_listener_to_serve_ = std::move(local->fd);
  acceptor_ = std::make_unique<UnixSocketAcceptor>(std::move(grpc->fd));
  return absl::OkStatus();
}

HandoverHooks Daemon::MakeHandoverHooks() {
  HandoverHooks handover;
  handover.prepare = [this]() -> absl::StatusOr<std::vector<NamedFd>> {
    acceptor_->Stop();   // new clients wait in the backlog for the successor
    StopPeerListener();  // its port is the successor's to bind (no SO_REUSEPORT)
    // On its way out: clients told UNAVAILABLE from here on go to the successor.
    server_->GetHealthCheckService()->SetServingStatus(false);
    store_->Shutdown();  // nothing changes from here on
    HandoverCollector collector;
    store_->ExportState(&collector);
    collector.Add(kHandedLockName, lock_.fd());
    collector.Add(kHandedSocketName, grpc_listener_.get());
    collector.Add(kHandedSocketName, local_listener_.get());
    if (!collector.status().ok()) return collector.status();
    return collector.Take();
  };
  handover.finished = [this](const absl::Status& sent) {
    if (sent.ok()) {
      socket_files_.MarkHandedOver();
    } else {
      Log(LogLevel::kError, "takeover: handing over failed: ", sent.message());
    }
    ::kill(::getpid(), SIGUSR2);
  };
  return handover;
}

absl::Status Daemon::StartLocalChannel() {
  ConnectionSettings connections;
  connections.max_connections = options_.max_connections;
  connections.handshake_timeout = options_.handshake_timeout;
  auto local_channel =
      LocalChannelServer::Start(std::move(local_listener_to_serve_), store_.get(), &metrics_,
                                &policy_, connections, MakeHandoverHooks());
  if (!local_channel.ok()) return local_channel.status();
  local_channel_ = *std::move(local_channel);
  return absl::OkStatus();
}

absl::Status Daemon::StartGrpc() {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;  // no listening port: connections come from the acceptor
  builder.RegisterService(service_.get());
  builder.SetMaxReceiveMessageSize(static_cast<int>(kMaxPutChunkBytes + (64 << 10)));
  // A connection with no call in flight this long is closed (GOAWAY; clients reconnect on
  // their next call). A client's Session stream keeps its connection busy.
  builder.AddChannelArgument(
      GRPC_ARG_MAX_CONNECTION_IDLE_MS,
      static_cast<int>(
          std::min<int64_t>(absl::ToInt64Milliseconds(options_.handshake_timeout), INT32_MAX)));
  // Calls in flight on one connection: what a client that stops reading can make the daemon
  // hold is this many replies (a Read stream's is one chunk), and per uid the store's bounds.
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             static_cast<int>(kMaxCallsPerGrpcConnection));
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(MetricsInterceptorFactory(&metrics_));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  server_ = builder.BuildAndStart();
  if (server_ == nullptr) return absl::InternalError("the gRPC server did not start");
  grpc_limit_ = std::make_unique<ConnectionLimit>("socket", options_.max_connections, ::getuid());
  return acceptor_->Start(server_.get(), &peers_, grpc_limit_.get());
}

absl::Status Daemon::StartPeerListener() {
  if (options_.peer_listen.empty()) return absl::OkStatus();
  auto where = ParseListenAddress(options_.peer_listen, "--peer-listen");
  if (!where.ok()) return where.status();
  // The port is this daemon's alone (no SO_REUSEPORT), taken before anything is served.
  auto port = PeerPortAcceptor::Listen(*where, options_.peer_listen);
  if (!port.ok()) return port.status();
  peer_port_ = *std::move(port);
  peer_service_ = std::make_unique<PeerService>(service_.get(), &peer_traffic_);
  grpc::ServerBuilder builder;
  // Connections come from peer_port_, which counts and bounds them; gRPC runs TLS on each.
  auto handoff = builder.experimental().AddExternalConnectionAcceptor(
      grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD,
      PeerServerCredentials(*peer_tls_));
  builder.RegisterService(peer_service_.get());
  builder.SetMaxReceiveMessageSize(kMaxPeerRequestBytes);  // peers send requests, never data
  // A connection that has not finished its TLS handshake this long after it connected is
  // closed, and so is one with no call in flight.
  const int handshake_ms = static_cast<int>(
      std::min<int64_t>(absl::ToInt64Milliseconds(options_.handshake_timeout), INT32_MAX));
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, handshake_ms);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, handshake_ms);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             static_cast<int>(kMaxCallsPerGrpcConnection));
  grpc::ResourceQuota memory("tensorbroker-peers");
  memory.Resize(kPeerServerMemoryBytes);
  builder.SetResourceQuota(memory);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(MetricsInterceptorFactory(&metrics_));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  peer_server_ = builder.BuildAndStart();
  if (peer_server_ == nullptr) return absl::InternalError("the peers' gRPC server did not start");
  if (absl::Status started = peer_port_->Start(std::move(handoff), options_.max_connections);
      !started.ok()) {
    return started;
  }
  Log(LogLevel::kInfo, "peers: serving on ", HostPort(*where, peer_port_->port()),
      " with mutual TLS as ", absl::StrJoin(peer_tls_->names, ", "), " (certificate valid until ",
      peer_tls_->not_after, "); peers need a certificate that ", options_.tls.ca, " verifies");
  return absl::OkStatus();
}

void Daemon::StopPeerListener() {
  std::call_once(peer_listener_stopped_, [this] {
    if (peer_port_ != nullptr) peer_port_->Stop();  // no new connection; the port is free
    if (peer_server_ == nullptr) return;
    peer_server_->Shutdown(std::chrono::system_clock::now());  // peers' calls end, a Watch too
    peer_server_->Wait();
  });
}

void Daemon::AnnounceReady() {
  server_->GetHealthCheckService()->SetServingStatus(true);
  Log(LogLevel::kInfo, "tensorbrokerd serving on ", options_.socket_path,
      " capacity=", FormatByteSize(options_.capacity_bytes), " pid=", ::getpid());
  // Ready only now that the socket accepts calls; the heartbeat then proves it keeps doing so.
  NotifyReady(absl::StrCat("serving on ", options_.socket_path));
  const std::optional<absl::Duration> watchdog = WatchdogTimeout();
  if (watchdog.has_value()) {
    Log(LogLevel::kInfo, "systemd watchdog: ", absl::FormatDuration(*watchdog), "; pinging every ",
        absl::FormatDuration(*watchdog / 2), " after a health check");
  }
  heartbeat_ = std::make_unique<ServiceHeartbeat>(options_.socket_path, watchdog);
  journal_stop_.journal = journal_.get();
}

Daemon::~Daemon() { StopServing(); }

void Daemon::StopServing() {
  if (heartbeat_ != nullptr) {
    NotifyStopping();
    heartbeat_->Stop();
  }
  if (server_ != nullptr) server_->GetHealthCheckService()->SetServingStatus(false);
  // New clients are refused (or, socket-activated, wait) from here on.
  if (acceptor_ != nullptr) acceptor_->Stop();
  StopPeerListener();
  // Fetches and watches end; nothing more is published.
  if (transfer_ != nullptr) transfer_->CancelAll();
  if (store_ != nullptr) store_->Shutdown();  // waiting Gets answer UNAVAILABLE
  // Its connections close, and the sessions they opened.
  if (local_channel_ != nullptr) local_channel_->Stop();
  sessions_.FinishAll(
      grpc::Status(grpc::StatusCode::UNAVAILABLE, "tensorbrokerd is shutting down"));
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
    server_->Wait();
  }
  if (expiry_ != nullptr) expiry_->Stop();
  if (timer_ != nullptr) timer_->Cancel(grace_timer_);
}

}  // namespace tensorbroker::daemon
