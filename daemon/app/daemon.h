// One running tensorbrokerd: everything it serves with, one member each, declared in start-up
// order, so that destruction is the shutdown order. Start takes the socket's lock (with
// --takeover: the running daemon's, with everything it hands over), adopts what a predecessor
// left (the descriptor store, a takeover), builds the store, binds (or takes) the sockets and
// serves them, and with --peer-listen serves other brokers over mutual TLS; it is ready
// (sd_notify READY=1) once the gRPC socket (and the peer listener) accept calls.
//
// The destructor shuts down: first it stops serving across the members (the heartbeat and the
// health service, then no new clients, waiting Gets answered UNAVAILABLE, the peer listener, the
// local channel's connections and the gRPC sessions ended, calls in flight finished within 5 s,
// pending expiry and the adoption grace stopped), then the members go in reverse order: the gRPC
// server, the local channel, the metrics endpoint, the timer, the store (every segment freed, after
// the descriptor store has stopped following it: what it holds is what the next instance adopts),
// the socket files this daemon bound (SocketFiles), and last the lock.
//
// Threading: Start and the destructor on the main thread, which must have blocked SIGUSR2
// (daemon_runner.cc): a takeover's hand-over, on the local channel's loop, raises it.
#ifndef TENSORBROKER_DAEMON_DAEMON_H_
#define TENSORBROKER_DAEMON_DAEMON_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "common/unique_fd.h"
#include "daemon/app/daemon_options.h"
#include "daemon/app/instance_lock.h"
#include "daemon/app/service_heartbeat.h"
#include "daemon/base/deadline_timer.h"
#include "daemon/base/listen_fds.h"
#include "daemon/frontend/grpc/broker_service.h"
#include "daemon/frontend/grpc/peer_service.h"
#include "daemon/frontend/grpc/session_reactor.h"
#include "daemon/frontend/local/local_channel_server.h"
#include "daemon/identity/peer_registry.h"
#include "daemon/identity/principal.h"
#include "daemon/metrics/call_metrics.h"
#include "daemon/metrics/metrics_http_server.h"
#include "daemon/net/connection_limits.h"
#include "daemon/net/peer_port_acceptor.h"
#include "daemon/net/peer_tls.h"
#include "daemon/net/socket_files.h"
#include "daemon/net/unix_socket_acceptor.h"
#include "daemon/persistence/adoption.h"
#include "daemon/persistence/fd_store.h"
#include "daemon/persistence/fd_store_journal.h"
#include "daemon/remote/grpc_transfer.h"
#include "daemon/remote/replica_fetcher.h"
#include "daemon/store/access_policy.h"
#include "daemon/store/pending_expiry.h"
#include "daemon/store/tensor_store.h"

namespace tensorbroker::daemon {

class Daemon {
 public:
  static absl::StatusOr<std::unique_ptr<Daemon>> Start(const DaemonOptions& options);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // A successor took over (--takeover) and the hand-over went out.
  bool handed_over() const { return socket_files_.handed_over(); }

 private:
  Daemon(const DaemonOptions& options, InstanceLock lock);

  // The start-up steps, in order; each builds the members it names.
  Adoption BuildStore(std::vector<NamedFd> handed);             // store_, timer_, expiry_, service_
  absl::Status StartMetricsHttp();                              // metrics_http_
  absl::Status TakeOrBindSockets(std::vector<NamedFd> handed);  // socket_files_, acceptor_
  absl::Status StartLocalChannel();                             // local_channel_
  absl::Status StartGrpc();                                     // grpc_limit_, server_
  absl::Status StartPeerListener();  // peer_port_, peer_service_, peer_server_
  void AnnounceReady();              // heartbeat_
  HandoverHooks MakeHandoverHooks();
  // The first half of shutting down (see above); the members' destructors do the rest.
  void StopServing();
  // Ends the peers' calls and frees the peer port: at a takeover's hand-over (the successor
  // binds it) or when stopping, whichever comes first; once.
  void StopPeerListener();

  const DaemonOptions options_;
  InstanceLock lock_;
  SocketFiles socket_files_;  // empty until the sockets are bound; removed just before the lock
  const AccessPolicy policy_;
  const FdStore fd_store_;                   // under systemd: published tensors kept there
  std::unique_ptr<FdStoreJournal> journal_;  // null without a descriptor store
  // remote[...]: the data plane to peers and the fetches the store asks for (before the store,
  // which calls the fetcher; the fetcher is stopped in StopServing, its threads joined below).
  std::unique_ptr<PeerChannels> peer_channels_;  // the calls to peers: fetches and watches
  std::unique_ptr<TransferSource> transfer_;
  std::unique_ptr<ReplicaFetcher> fetcher_;
  std::unique_ptr<TensorStore> store_;
  // Joined before the store goes: its threads publish into it.
  struct FetcherStop {
    std::unique_ptr<ReplicaFetcher>* fetcher = nullptr;
    ~FetcherStop() {
      if (fetcher != nullptr) fetcher->reset();
    }
  } fetcher_stop_;
  // Destroyed just before the store: once serving, the journal stops first (see above).
  struct JournalStop {
    FdStoreJournal* journal = nullptr;
    ~JournalStop() {
      if (journal != nullptr) journal->Stop();
    }
  } journal_stop_;
  SessionRegistry sessions_;
  CallMetrics metrics_;
  PeerRegistry peers_;
  PeerTraffic peer_traffic_;              // what each peer (--peer-listen) asked
  std::unique_ptr<DeadlineTimer> timer_;  // waiting Gets' deadlines, expiry, adoption grace
  std::unique_ptr<PendingExpiry> expiry_;
  uint64_t grace_timer_ = 0;
  std::unique_ptr<BrokerService> service_;
  const Principal operator_view_;  // the metrics endpoint sees everything, like an administrator
  std::unique_ptr<MetricsHttpServer> metrics_http_;
  UniqueFd grpc_listener_;   // duplicates kept to hand over to a successor (--takeover) after
  UniqueFd local_listener_;  // the acceptors closed theirs
  UniqueFd local_listener_to_serve_;  // moved into the local channel when it starts
  std::unique_ptr<UnixSocketAcceptor> acceptor_;
  std::unique_ptr<LocalChannelServer> local_channel_;
  std::unique_ptr<ConnectionLimit> grpc_limit_;
  std::unique_ptr<grpc::Server> server_;
  // --peer-listen: other brokers' reads over mutual TLS with the certificates of --tls-*.
  std::optional<PeerTls> peer_tls_;
  std::unique_ptr<PeerService> peer_service_;
  std::unique_ptr<PeerPortAcceptor> peer_port_;  // accepts for peer_server_; stopped first
  std::unique_ptr<grpc::Server> peer_server_;
  std::once_flag peer_listener_stopped_;
  std::unique_ptr<ServiceHeartbeat> heartbeat_;  // set once serving
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_DAEMON_H_
