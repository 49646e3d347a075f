// The gRPC channels this broker calls its peers on, over mutual TLS with its own certificates:
// one per peer endpoint, kept for the next call (at most kMaxPeerChannels; past that they are
// made anew), and every call in progress, so that CancelAll ends them when the daemon stops.
// Shared by the data plane (grpc_transfer) and the watches that keep replicas fresh
// (replica_watches). Thread-safe.
#ifndef TENSORBROKER_DAEMON_PEER_CHANNELS_H_
#define TENSORBROKER_DAEMON_PEER_CHANNELS_H_

#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "common/mutex.h"
#include "daemon/net/peer_tls.h"
#include "daemon/remote/peer_address.h"

namespace tensorbroker::daemon {

inline constexpr size_t kMaxPeerChannels = 256;

class PeerChannels {
 public:
  explicit PeerChannels(const PeerTls& tls);

  std::shared_ptr<grpc::Channel> ChannelFor(const PeerEndpoint& peer);

  // A call in progress on `context` until this is destroyed: CancelAll cancels it.
  class Registration {
   public:
    Registration(PeerChannels* channels, grpc::ClientContext* context)
        : channels_(channels), context_(context) {}
    ~Registration();
    Registration(const Registration&) = delete;
    Registration& operator=(const Registration&) = delete;

   private:
    PeerChannels* const channels_;
    grpc::ClientContext* const context_;
  };
  // Registers `context` (before its call starts); UNAVAILABLE "this broker is stopping" after
  // CancelAll.
  absl::StatusOr<std::unique_ptr<Registration>> Register(grpc::ClientContext* context);
  // Ends every registered call (TryCancel) and refuses later ones.
  void CancelAll();
  bool cancelled() const;

 private:
  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  mutable Mutex mu_;
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels_ ABSL_GUARDED_BY(mu_);
  std::set<grpc::ClientContext*> active_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_PEER_CHANNELS_H_
