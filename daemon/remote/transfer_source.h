// The data plane between brokers: how the bytes of a replica come from the peer that holds the
// original. The replica cache sees only this interface, so a transport beside gRPC (UCX or RDMA
// verbs, which NIXL and Mooncake build on) can be added without touching it: it would move the
// same bytes into the same sink, one-sided, after the same metadata exchange.
//
// Threading: Fetch blocks its calling thread for the transfer; implementations are thread-safe
// (fetches of different names run side by side).
#ifndef TENSORBROKER_DAEMON_TRANSFER_SOURCE_H_
#define TENSORBROKER_DAEMON_TRANSFER_SOURCE_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "daemon/identity/principal_set.h"
#include "daemon/remote/peer_address.h"
#include "daemon/store/tensor_store.h"

namespace tensorbroker::daemon {

// What the origin says of a tensor, validated as a request would be.
struct RemoteTensorInfo {
  TensorSpec spec;         // name, dtype, shape, compact strides and nbytes; CPU; immutable
  uint64_t version = 0;    // the origin's version
  PrincipalSet readers;    // the origin's readers (owner and administrators aside)
  uint32_t owner_uid = 0;  // the origin's owner
};

// Gives the memory for the bytes once the tensor is known (exactly spec.nbytes), or why not
// (the fetch then ends with that status). Called at most once per fetch.
using ReplicaSink = std::function<absl::StatusOr<absl::Span<uint8_t>>(const RemoteTensorInfo&)>;

class TransferSource {
 public:
  virtual ~TransferSource() = default;
  // Copies the current version of `name` at `peer` into the sink's memory, in compact C order.
  // NOT_FOUND when the peer has no such tensor this broker may read; FAILED_PRECONDITION when it
  // lives in device memory or is mutable there (not replicated); UNAVAILABLE naming the peer and
  // what failed (the connection, a malformed answer, too many or too few bytes, the deadline).
  // The sink's memory holds the whole tensor only when it returns OK.
  virtual absl::StatusOr<RemoteTensorInfo> Fetch(const PeerEndpoint& peer, const std::string& name,
                                                 const ReplicaSink& sink,
                                                 absl::Duration timeout) = 0;
  // Ends every fetch in progress (UNAVAILABLE) and refuses later ones: the daemon is stopping.
  virtual void CancelAll() = 0;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_TRANSFER_SOURCE_H_
