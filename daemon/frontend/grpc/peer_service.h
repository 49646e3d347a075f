// tensorbroker.v1.Broker as other brokers see it on --peer-listen (mutual TLS): the reads
// (Stat, Read, List, Watch, Stats, Ping), answered by the broker's BrokerService for the peer's
// principal (peer:NAME, from its verified certificate), and every other method refused with
// PERMISSION_DENIED naming it: a peer never creates, publishes, deletes or holds leases here,
// and Get's answer (descriptors of this node's memory) means nothing on another node.
//
// Ownership: `local` must outlive the service's calls. Thread-safe: no state of its own.
#ifndef TENSORBROKER_DAEMON_PEER_SERVICE_H_
#define TENSORBROKER_DAEMON_PEER_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <cstddef>

#include "absl/strings/string_view.h"
#include "daemon/base/refusal_log.h"
#include "daemon/frontend/grpc/broker_service.h"
#include "daemon/metrics/peer_traffic.h"
#include "tensorbroker/v1/broker.grpc.pb.h"

namespace tensorbroker::daemon {

// Largest message a peer may send (peers send requests, never tensor data).
inline constexpr int kMaxPeerRequestBytes = 64 << 10;
// Most memory gRPC may spend on the peer listener's connections (its resource quota).
inline constexpr size_t kPeerServerMemoryBytes = size_t{256} << 20;

class PeerService final : public v1::Broker::CallbackService {
 public:
  // `traffic` counts each peer's calls and the bytes sent to it.
  PeerService(BrokerService* local, PeerTraffic* traffic) : local_(local), traffic_(traffic) {}

  // The reads, as the local service answers them.
  grpc::ServerWriteReactor<v1::ReadResponse>* Read(grpc::CallbackServerContext*,
                                                   const v1::ReadRequest*) override;
  grpc::ServerWriteReactor<v1::WatchEvent>* Watch(grpc::CallbackServerContext*,
                                                  const v1::WatchRequest*) override;
  grpc::ServerUnaryReactor* List(grpc::CallbackServerContext*, const v1::ListRequest*,
                                 v1::ListResponse*) override;
  grpc::ServerUnaryReactor* Stat(grpc::CallbackServerContext*, const v1::StatRequest*,
                                 v1::TensorInfo*) override;
  grpc::ServerUnaryReactor* Stats(grpc::CallbackServerContext*, const v1::StatsRequest*,
                                  v1::BrokerStats*) override;
  grpc::ServerUnaryReactor* Ping(grpc::CallbackServerContext*, const v1::Empty*,
                                 v1::Empty*) override;

  // The rest: PERMISSION_DENIED.
  grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionEvent>* Session(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* Create(grpc::CallbackServerContext*, const v1::CreateRequest*,
                                   v1::TensorGrant*) override;
  grpc::ServerUnaryReactor* Seal(grpc::CallbackServerContext*, const v1::SealRequest*,
                                 v1::TensorInfo*) override;
  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext*, const v1::AbortRequest*,
                                  v1::Empty*) override;
  grpc::ServerReadReactor<v1::PutRequest>* Put(grpc::CallbackServerContext*,
                                               v1::TensorInfo*) override;
  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext*, const v1::GetRequest*,
                                v1::TensorGrant*) override;
  grpc::ServerUnaryReactor* Release(grpc::CallbackServerContext*, const v1::ReleaseRequest*,
                                    v1::Empty*) override;
  grpc::ServerUnaryReactor* Retain(grpc::CallbackServerContext*, const v1::RetainRequest*,
                                   v1::TensorGrant*) override;
  grpc::ServerUnaryReactor* Delete(grpc::CallbackServerContext*, const v1::DeleteRequest*,
                                   v1::Empty*) override;

 private:
  // PERMISSION_DENIED for `method`, logged with the peer's name.
  grpc::Status Refuse(const grpc::CallbackServerContext* context, absl::string_view method) const;
  grpc::ServerUnaryReactor* Refused(grpc::CallbackServerContext* context,
                                    absl::string_view method) const;

  // The counters of the call's peer (its first name; "?" when gRPC gives none); counts the call.
  PeerCounters* Count(const grpc::CallbackServerContext* context) const;

  BrokerService* const local_;
  PeerTraffic* const traffic_;
  // Calls a peer may not make: one warning per peer and method per 10 s, with counts.
  mutable RefusalLog refusals_{"peers"};
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_PEER_SERVICE_H_
