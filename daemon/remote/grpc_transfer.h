// The data plane over gRPC: a peer's Read stream (1 MiB chunks, compact C order) over mutual TLS
// with this broker's certificates, copied straight into the sink's memory. One channel per peer
// endpoint, kept for the next fetch (at most kMaxPeerChannels; past that they are made anew).
//
// Everything the peer says is checked as a request would be: the tensor's name, dtype, shape
// and readers, that it is a CPU tensor and not mutable, and that exactly its size in bytes
// arrives. Thread-safe.
#ifndef TENSORBROKER_DAEMON_GRPC_TRANSFER_H_
#define TENSORBROKER_DAEMON_GRPC_TRANSFER_H_

#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <set>
#include <string>

#include "common/mutex.h"
#include "daemon/net/peer_tls.h"
#include "daemon/remote/transfer_source.h"
#include "tensorbroker/v1/broker.pb.h"

namespace tensorbroker::daemon {

inline constexpr size_t kMaxPeerChannels = 256;

// The tensor a peer's first Read message describes, validated (see TransferSource::Fetch for the
// codes); `peer` names the peer in messages.
absl::StatusOr<RemoteTensorInfo> ValidateRemoteInfo(const v1::TensorInfo& info,
                                                    const std::string& name,
                                                    const std::string& peer);

class GrpcTransfer final : public TransferSource {
 public:
  explicit GrpcTransfer(const PeerTls& tls);

  absl::StatusOr<RemoteTensorInfo> Fetch(const PeerEndpoint& peer, const std::string& name,
                                         const ReplicaSink& sink, absl::Duration timeout) override;
  void CancelAll() override;

 private:
  std::shared_ptr<grpc::Channel> ChannelFor(const PeerEndpoint& peer);

  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  Mutex mu_;
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels_ ABSL_GUARDED_BY(mu_);
  std::set<grpc::ClientContext*> active_ ABSL_GUARDED_BY(mu_);  // fetches in progress
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_GRPC_TRANSFER_H_
