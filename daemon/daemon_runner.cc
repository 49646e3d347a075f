#include "daemon/daemon_runner.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fcntl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/byte_size.h"
#include "common/cuda_devices.h"
#include "common/prometheus_format.h"
#include "common/socket_path.h"
#include "daemon/access_policy.h"
#include "daemon/adoption.h"
#include "daemon/broker_service.h"
#include "daemon/connection_limits.h"
#include "daemon/cpu_segment_pool.h"
#include "daemon/deadline_timer.h"
#include "daemon/descriptor_reserve.h"
#include "daemon/fd_store.h"
#include "daemon/fd_store_journal.h"
#include "daemon/handover.h"
#ifdef TENSORBROKER_HAVE_CUDA
#include "daemon/cuda_slab_pool.h"
#endif
#include "daemon/instance_lock.h"
#include "daemon/listen_fds.h"
#include "daemon/local_channel_server.h"
#include "daemon/log.h"
#include "daemon/metrics_http_server.h"
#include "daemon/metrics_interceptor.h"
#include "daemon/service_heartbeat.h"
#include "daemon/service_notifier.h"
#include "daemon/session_reactor.h"
#include "daemon/socket_directory_setup.h"
#include "daemon/tensor_store.h"
#include "daemon/unix_listener.h"
#include "daemon/unix_socket_acceptor.h"

namespace tensorbroker::daemon {
namespace {

// How long memory adopted at start stays out of reuse (cpu_segment_pool.h): a client's default
// reconnect timeout and then some.
constexpr absl::Duration kAdoptionGrace = absl::Seconds(60);

uint32_t Fnv1a(const std::string& text) {
  uint32_t hash = 2166136261u;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 16777619u;
  }
  return hash;
}

// 32 random bits, hex.
std::string InstanceId() {
  std::random_device random;
  return absl::StrCat(absl::Hex(random(), absl::kZeroPad8));
}

// Blocks until one of `signals` arrives; returns its number.
int WaitForSignal(const sigset_t& signals) {
  int signal = 0;
  while (sigwait(&signals, &signal) != 0) {
  }
  return signal;
}

// SIGHUP: re-reads the settings; applies the log level, says what else would need a restart.
void Reload(const DaemonOptions& running, const OptionsLoader& reload) {
  if (!reload) return;
  auto fresh = reload();
  if (!fresh.ok()) {
    Log(LogLevel::kError, "SIGHUP: configuration not reloaded: ", fresh.status().message(),
        "; keeping the running configuration");
    return;
  }
  std::vector<std::string> changes;
  const LogLevel before = CurrentLogLevel();
  if (fresh->log_level != before) {
    SetLogLevel(fresh->log_level);
    changes.push_back(
        absl::StrCat("log-level ", LogLevelName(before), " -> ", LogLevelName(fresh->log_level)));
  }
  auto needs_restart = [&](absl::string_view key, const std::string& was, const std::string& is) {
    if (was == is) return;
    Log(LogLevel::kWarning, "SIGHUP: ", key, " changed (", was, " -> ", is,
        "); it takes effect at the next start");
  };
  needs_restart("socket", running.socket_path, fresh->socket_path);
  needs_restart("capacity", absl::StrCat(running.capacity_bytes),
                absl::StrCat(fresh->capacity_bytes));
  auto cuda = [](const DaemonOptions& o) {
    return o.cuda_capacity_bytes.has_value() ? absl::StrCat(*o.cuda_capacity_bytes)
                                             : std::string("default");
  };
  needs_restart("cuda-capacity", cuda(running), cuda(*fresh));
  needs_restart("metrics-listen", running.metrics_listen, fresh->metrics_listen);
  Log(LogLevel::kNotice, "SIGHUP: configuration reloaded from ",
      fresh->config_path.empty() ? std::string("flags only") : fresh->config_path, ": ",
      changes.empty() ? std::string("nothing to change at run time")
                      : absl::StrJoin(changes, ", "));
}

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
    CudaSlabPoolOptions slabs;
    slabs.ordinal = gpu.ordinal;
    slabs.capacity_bytes = capacity;
    slabs.name_prefix = name_prefix;
    pools.push_back(std::make_unique<CudaSlabPool>(slabs));
#endif
  }
  return pools;
}

// The descriptors the service manager (listen_fds.h) or a daemon taken over (handover.h) handed
// over, adopted into `cpu_pool` (adoption.h), with a log line saying what came back. Those that are
// neither a segment nor a record (the socket unit's sockets) are left in Adoption::others.
Adoption AdoptHandedDescriptors(std::vector<NamedFd> handed, CpuSegmentPool* cpu_pool,
                                const FdStore& fd_store) {
  if (handed.empty()) return Adoption{};
  Adoption adopted = AdoptStoredDescriptors(std::move(handed), cpu_pool, fd_store);
  if (adopted.tensors.empty() && adopted.segments_freed == 0 && adopted.records_dropped == 0) {
    return adopted;  // sockets only
  }
  Log(LogLevel::kNotice, "adopted ", adopted.tensors.size(), " CPU tensors (",
      FormatByteSize(adopted.bytes), ") in ", adopted.segments,
      " segments from the previous instance; freed ", adopted.segments_freed,
      " segments no tensor was in; dropped ", adopted.records_dropped,
      " records; CUDA tensors do not survive a restart");
  return adopted;
}

// The gRPC socket and the local channel's: the socket unit's when it handed them over (taken
// out of `handed`), bound here otherwise. Anything else handed over is closed, with a warning.
struct DaemonListeners {
  UnixListener grpc;
  UnixListener local;
};
absl::StatusOr<DaemonListeners> TakeOrBindListeners(const std::string& socket_path,
                                                    const std::string& local_path,
                                                    std::vector<NamedFd> handed) {
  DaemonListeners listeners;
  // The local channel first: a client that reaches the gRPC socket finds it there.
  auto local = TakeOrBindUnixListener(&handed, local_path, SOCK_SEQPACKET,
                                      "local channel (--socket + \".fd\")");
  if (!local.ok()) return local.status();
  listeners.local = *std::move(local);
  auto grpc = TakeOrBindUnixListener(&handed, socket_path, SOCK_STREAM, "--socket");
  if (!grpc.ok()) {
    listeners.local.RemoveFileIfOurs(local_path);
    return grpc.status();
  }
  listeners.grpc = *std::move(grpc);
  for (const NamedFd& other : handed) {
    Log(LogLevel::kWarning, "descriptor '", LogSafe(other.name),
        "' handed over at start is neither a segment, a record, nor a socket for ", socket_path,
        " or ", local_path, "; closed");
  }
  if (listeners.grpc.inherited || listeners.local.inherited) {
    Log(LogLevel::kInfo, "socket activation: ", listeners.grpc.inherited ? "the gRPC socket" : "",
        listeners.grpc.inherited && listeners.local.inherited ? " and " : "",
        listeners.local.inherited ? "the local channel's socket" : "",
        " handed over by the service manager");
  }
  return listeners;
}

// Calls TensorStore::ExpirePending periodically on the timer, until Stop (or destruction),
// which waits for a run in progress.
class PendingExpiry {
 public:
  PendingExpiry(TensorStore* store, DeadlineTimer* timer, absl::Duration timeout)
      : store_(store),
        timer_(timer),
        period_(std::clamp(timeout / 10, absl::Milliseconds(10), absl::Seconds(1))) {
    std::lock_guard<std::mutex> lock(mu_);
    ScheduleLocked();
  }
  ~PendingExpiry() { Stop(); }
  PendingExpiry(const PendingExpiry&) = delete;
  PendingExpiry& operator=(const PendingExpiry&) = delete;

  // Idempotent.
  void Stop() {
    std::unique_lock<std::mutex> lock(mu_);
    if (stopped_) return;
    stopped_ = true;
    timer_->Cancel(next_);
    idle_.wait(lock, [this] { return !running_; });
  }

 private:
  void ScheduleLocked() {
    next_ = timer_->Schedule(absl::Now() + period_, [this] {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopped_) return;
        running_ = true;
      }
      store_->ExpirePending(absl::Now());
      std::lock_guard<std::mutex> lock(mu_);
      running_ = false;
      idle_.notify_all();
      if (!stopped_) ScheduleLocked();
    });
  }

  TensorStore* const store_;
  DeadlineTimer* const timer_;
  const absl::Duration period_;
  std::mutex mu_;
  std::condition_variable idle_;
  uint64_t next_ = 0;
  bool running_ = false;
  bool stopped_ = false;
};

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

}  // namespace

std::string SegmentPrefixFor(const std::string& socket_path) {
  std::error_code error;
  std::filesystem::path absolute = std::filesystem::absolute(socket_path, error);
  const std::string key = error ? socket_path : absolute.lexically_normal().string();
  return absl::StrCat("tb-", absl::Hex(Fnv1a(key), absl::kZeroPad8), "-");
}

absl::Status RunDaemon(const DaemonOptions& options, const OptionsLoader& reload) {
  SetLogLevel(options.log_level);
  // Stop and reload signals are taken synchronously by this thread; every thread created later
  // inherits the mask, so no gRPC thread is interrupted by them.
  sigset_t handled_signals;
  sigemptyset(&handled_signals);
  sigaddset(&handled_signals, SIGTERM);
  sigaddset(&handled_signals, SIGINT);
  sigaddset(&handled_signals, SIGHUP);   // waited for below too: reload
  sigaddset(&handled_signals, SIGUSR2);  // raised here once a takeover has been handed over
  pthread_sigmask(SIG_BLOCK, &handled_signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  // A directory someone else may write is no place for a socket that clients trust.
  if (absl::Status ready = PrepareSocketDirectory(options.socket_path); !ready.ok()) return ready;
  // Before a takeover's descriptors arrive, and adoption, which opens a second descriptor of
  // every segment handed over.
  RaiseDescriptorLimit(options.max_connections);
  // What the service manager handed over (socket activation, the descriptor store) and, with
  // --takeover, what the running daemon hands over: its lock among them.
  std::vector<NamedFd> handed;
  if (auto listen_fds = TakeListenFds(); listen_fds.ok()) {
    handed = *std::move(listen_fds);
  } else {
    Log(LogLevel::kWarning, "adoption: ", listen_fds.status().message(), "; adopting nothing");
  }
  UniqueFd handed_lock;
  if (options.takeover) {
    const absl::Time asked = absl::Now();
    auto taken = RequestTakeover(LocalChannelPath(options.socket_path), absl::Seconds(60));
    if (!taken.ok()) return taken.status();
    for (NamedFd& fd : *taken) {
      if (fd.name == kHandedLockName) {
        handed_lock = std::move(fd.fd);
      } else {
        handed.push_back(std::move(fd));
      }
    }
    Log(LogLevel::kNotice, "takeover: ", taken->size(), " descriptors handed over in ",
        absl::FormatDuration(absl::Now() - asked));
  }
  auto lock = options.takeover ? InstanceLock::Adopt(options.socket_path, std::move(handed_lock))
                               : InstanceLock::Acquire(options.socket_path);
  if (!lock.ok()) return lock.status();

  const std::string prefix = SegmentPrefixFor(options.socket_path);

  // A fresh instance id in every name: a client that outlives this daemon must never mistake a
  // successor's segment (or slab) for one it has cached.
  const AccessPolicy policy(options.access);
  // Under systemd, published CPU tensors are kept with the service manager (its descriptor
  // store) and adopted from what it hands back at the next start.
  const FdStore fd_store = FdStore::FromEnvironment();
  std::unique_ptr<FdStoreJournal> journal;
  if (fd_store.enabled()) journal = std::make_unique<FdStoreJournal>(fd_store);
  StoreOptions store_options;
  store_options.pending_timeout = options.pending_timeout;
  store_options.quota_for = [&policy](uint32_t uid) { return policy.QuotaFor(uid); };
  store_options.may_make_tensor = [] { return CheckDescriptorsToSpare("name"); };
  store_options.journal = journal.get();
  store_options.watch_log = options.watch_log;
  // Versions keep increasing across restarts and takeovers without a counter kept anywhere:
  // this instance starts at the clock (microseconds), past the previous one's unless it
  // published over a million versions a second on average; adoption raises it past every
  // version adopted in any case.
  store_options.first_version = static_cast<uint64_t>(absl::ToUnixMicros(absl::Now()));
  auto pools = MakePools(options, absl::StrCat(prefix, InstanceId(), "-"), journal.get());
  Adoption adopted = AdoptHandedDescriptors(std::move(handed),
                                            static_cast<CpuSegmentPool*>(pools[0].get()), fd_store);
  auto store = std::make_unique<TensorStore>(std::move(pools), std::move(store_options));
  for (TensorStore::AdoptedTensor& tensor : adopted.tensors) {
    if (absl::Status taken = store->AdoptPublished(std::move(tensor)); !taken.ok()) {
      Log(LogLevel::kWarning, "adoption: ", taken.message());
    }
  }
  SessionRegistry sessions;
  CallMetrics metrics;
  PeerRegistry peers;
  // Times out waiting Gets, and expires pending tensors every tenth of the pending timeout.
  auto timer = std::make_unique<DeadlineTimer>();
  PendingExpiry expiry(store.get(), timer.get(), options.pending_timeout);
  // Clients of the previous instance reconnect within their reconnect timeout (30 s by default)
  // and lease what they still hold again; until then no adopted memory is reused.
  uint64_t grace_timer = 0;
  if (!adopted.tensors.empty()) {
    grace_timer = timer->Schedule(absl::Now() + kAdoptionGrace, [&store] {
      store->EndAdoptionGrace();
      Log(LogLevel::kInfo, "adoption: grace period over; adopted memory may be reused");
    });
  }
  ServiceParts parts;
  parts.store = store.get();
  parts.sessions = &sessions;
  parts.metrics = &metrics;
  parts.peers = &peers;
  parts.policy = &policy;
  parts.timer = timer.get();
  parts.pending_timeout = options.pending_timeout;
  BrokerService service(parts);
  // The operator's view (Prometheus) sees everything, like an administrator.
  const Principal operator_view{static_cast<uint32_t>(::getuid()), {}, true};

  // Bound before the socket serves, so that a bad --metrics-listen stops the start cleanly.
  std::unique_ptr<MetricsHttpServer> metrics_http;
  if (!options.metrics_listen.empty()) {
    auto started = MetricsHttpServer::Start(options.metrics_listen, [&service, &operator_view] {
      return PrometheusText(service.CurrentStats(operator_view));
    });
    if (!started.ok()) return started.status();
    metrics_http = *std::move(started);
    Log(LogLevel::kInfo, "metrics at http://", metrics_http->bound_address(), "/metrics");
  }

  const std::string local_path = LocalChannelPath(options.socket_path);
  auto listeners = TakeOrBindListeners(options.socket_path, local_path, std::move(adopted.others));
  if (!listeners.ok()) return listeners.status();
  if (options.takeover) {  // the sockets a daemon taken over handed over are ours now
    listeners->grpc.ClaimFile(options.socket_path);
    listeners->local.ClaimFile(local_path);
  }
  // Socket files the socket unit made stay for the next instance, as do those handed over to a
  // successor; those bound here go with us.
  std::atomic<bool> handed_over{false};
  auto remove_socket_files = [&] {
    if (handed_over.load()) return;
    listeners->grpc.RemoveFileIfOurs(options.socket_path);
    listeners->local.RemoveFileIfOurs(local_path);
  };
  // Kept to hand over to a successor (--takeover) after the acceptors closed theirs.
  const UniqueFd grpc_listener(::fcntl(listeners->grpc.fd.get(), F_DUPFD_CLOEXEC, 0));
  const UniqueFd local_listener(::fcntl(listeners->local.fd.get(), F_DUPFD_CLOEXEC, 0));
  auto acceptor = std::make_unique<UnixSocketAcceptor>(std::move(listeners->grpc.fd));
  HandoverHooks handover;
  handover.prepare = [&]() -> absl::StatusOr<std::vector<NamedFd>> {
    acceptor->Stop();   // new clients wait in the backlog for the successor
    store->Shutdown();  // nothing changes from here on
    HandoverCollector collector;
    store->ExportState(&collector);
    collector.Add(kHandedLockName, lock->fd());
    collector.Add(kHandedSocketName, grpc_listener.get());
    collector.Add(kHandedSocketName, local_listener.get());
    if (!collector.status().ok()) return collector.status();
    return collector.Take();
  };
  handover.finished = [&](const absl::Status& sent) {
    if (sent.ok()) {
      handed_over = true;
    } else {
      Log(LogLevel::kError, "takeover: handing over failed: ", sent.message());
    }
    ::kill(::getpid(), SIGUSR2);
  };
  ConnectionSettings connections;
  connections.max_connections = options.max_connections;
  connections.handshake_timeout = options.handshake_timeout;
  auto local_channel = LocalChannelServer::Start(std::move(listeners->local.fd), store.get(),
                                                 &metrics, &policy, connections, handover);
  if (!local_channel.ok()) {
    remove_socket_files();
    return local_channel.status();
  }

  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;  // no listening port: connections come from the acceptor
  builder.RegisterService(&service);
  builder.SetMaxReceiveMessageSize(static_cast<int>(kMaxPutChunkBytes + (64 << 10)));
  // A connection with no call in flight this long is closed (GOAWAY; clients reconnect on
  // their next call). A client's Session stream keeps its connection busy.
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                             static_cast<int>(std::min<int64_t>(
                                 absl::ToInt64Milliseconds(options.handshake_timeout), INT32_MAX)));
  // Calls in flight on one connection: what a client that stops reading can make the daemon
  // hold is this many replies (a Read stream's is one chunk), and per uid the store's bounds.
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             static_cast<int>(kMaxCallsPerGrpcConnection));
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(MetricsInterceptorFactory(&metrics));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) {
    remove_socket_files();
    return absl::InternalError("the gRPC server did not start");
  }
  ConnectionLimit grpc_limit("socket", options.max_connections, ::getuid());
  if (absl::Status started = acceptor->Start(server.get(), &peers, &grpc_limit); !started.ok()) {
    server->Shutdown();
    remove_socket_files();
    return started;
  }
  server->GetHealthCheckService()->SetServingStatus(true);
  Log(LogLevel::kInfo, "tensorbrokerd serving on ", options.socket_path,
      " capacity=", FormatByteSize(options.capacity_bytes), " pid=", ::getpid());
  // Ready only now that the socket accepts calls; the heartbeat then proves it keeps doing so.
  NotifyReady(absl::StrCat("serving on ", options.socket_path));
  const std::optional<absl::Duration> watchdog = WatchdogTimeout();
  if (watchdog.has_value()) {
    Log(LogLevel::kInfo, "systemd watchdog: ", absl::FormatDuration(*watchdog), "; pinging every ",
        absl::FormatDuration(*watchdog / 2), " after a health check");
  }
  ServiceHeartbeat heartbeat(options.socket_path, watchdog);

  int signal = 0;
  while ((signal = WaitForSignal(handled_signals)) == SIGHUP) Reload(options, reload);
  if (signal == SIGUSR2) {
    Log(LogLevel::kNotice,
        handed_over.load() ? "handed over to the new daemon; exiting" : "takeover failed; exiting");
  } else {
    Log(LogLevel::kInfo, "received ", strsignal(signal), "; shutting down");
  }
  NotifyStopping();
  heartbeat.Stop();

  server->GetHealthCheckService()->SetServingStatus(false);
  acceptor->Stop();          // new clients are refused (or, socket-activated, wait) from here on
  store->Shutdown();         // waiting Gets answer UNAVAILABLE
  (*local_channel)->Stop();  // its connections close, and the sessions they opened
  sessions.FinishAll(grpc::Status(grpc::StatusCode::UNAVAILABLE, "tensorbrokerd is shutting down"));
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  server->Wait();
  server.reset();
  expiry.Stop();
  timer->Cancel(grace_timer);
  timer.reset();
  metrics_http.reset();
  local_channel->reset();
  // What the descriptor store holds now is what the next instance adopts: tearing the store
  // down frees memory here, not there.
  if (journal != nullptr) journal->Stop();
  store.reset();  // closes every segment
  remove_socket_files();
  Log(LogLevel::kInfo, "tensorbrokerd stopped");
  return absl::OkStatus();
}

}  // namespace tensorbroker::daemon
