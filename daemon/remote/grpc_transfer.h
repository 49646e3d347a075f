// The data plane over gRPC: a peer's Read stream (1 MiB chunks, compact C order) over mutual TLS
// with this broker's certificates (PeerChannels), copied straight into the sink's memory.
//
// Everything the peer says is checked as a request would be: the tensor's name, dtype, shape
// and readers, that it is a CPU tensor and not mutable, and that exactly its size in bytes
// arrives. A peer that drips its bytes is cut after one stall timeout (transfer_pace.h).
// Thread-safe.
#ifndef TENSORBROKER_DAEMON_GRPC_TRANSFER_H_
#define TENSORBROKER_DAEMON_GRPC_TRANSFER_H_

#include <grpcpp/grpcpp.h>

#include <string>

#include "daemon/remote/peer_channels.h"
#include "daemon/remote/transfer_pace.h"
#include "daemon/remote/transfer_source.h"
#include "tensorbroker/v1/broker.pb.h"

namespace tensorbroker::daemon {

// The tensor a peer's first Read message describes, validated (see TransferSource::Fetch for the
// codes); `peer` names the peer in messages.
absl::StatusOr<RemoteTensorInfo> ValidateRemoteInfo(const v1::TensorInfo& info,
                                                    const std::string& name,
                                                    const std::string& peer);

class GrpcTransfer final : public TransferSource {
 public:
  // `channels` outlives this. `stall_timeout`: --fetch-stall-timeout (TransferPace).
  explicit GrpcTransfer(PeerChannels* channels, absl::Duration stall_timeout = kDefaultStallTimeout)
      : channels_(channels), pace_(stall_timeout) {}

  absl::StatusOr<RemoteTensorInfo> Fetch(const PeerEndpoint& peer, const std::string& name,
                                         const ReplicaSink& sink, absl::Duration timeout) override;
  void CancelAll() override;

 private:
  PeerChannels* const channels_;
  TransferPace pace_;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_GRPC_TRANSFER_H_
