#include "daemon/frontend/grpc/peer_service.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/base/log.h"
#include "daemon/net/peer_tls.h"

namespace tensorbroker::daemon {
namespace {

// A streaming call answered with its status at once; deletes itself when gRPC is done with it.
template <class Base>
class FinishedReactor final : public Base {
 public:
  explicit FinishedReactor(grpc::Status status) { this->Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

// The peer's first name, as logs and metrics show it.
std::string PeerNameOf(const grpc::CallbackServerContext* context) {
  const std::vector<std::string> names = PeerNamesOf(*context->auth_context());
  return names.empty() ? std::string("?") : LogSafe(names.front());
}

}  // namespace

PeerCounters* PeerService::Count(const grpc::CallbackServerContext* context) const {
  PeerCounters* counters = traffic_->For(PeerNameOf(context));
  counters->calls.fetch_add(1, std::memory_order_relaxed);
  return counters;
}

grpc::Status PeerService::Refuse(const grpc::CallbackServerContext* context,
                                 absl::string_view method) const {
  Count(context);
  const std::string peer = PeerNameOf(context);
  refusals_.Note(absl::StrCat(peer, "\n", method),
                 absl::StrCat("peer ", peer, " called ", method, ": peers may only read"),
                 "call(s)", absl::StrCat("from ", LogSafe(context->peer())));
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                      absl::StrCat(method, ": peer '", peer,
                                   "' may only read here (Stat, Read, List, Watch, Stats, Ping); ",
                                   method, " is for the broker's local clients"));
}

grpc::ServerUnaryReactor* PeerService::Refused(grpc::CallbackServerContext* context,
                                               absl::string_view method) const {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(Refuse(context, method));
  return reactor;
}

grpc::ServerWriteReactor<v1::ReadResponse>* PeerService::Read(grpc::CallbackServerContext* context,
                                                              const v1::ReadRequest* request) {
  return local_->CountedRead(context, request, &Count(context)->sent_bytes);
}

grpc::ServerWriteReactor<v1::WatchEvent>* PeerService::Watch(grpc::CallbackServerContext* context,
                                                             const v1::WatchRequest* request) {
  Count(context);
  return local_->Watch(context, request);
}

grpc::ServerUnaryReactor* PeerService::List(grpc::CallbackServerContext* context,
                                            const v1::ListRequest* request,
                                            v1::ListResponse* response) {
  Count(context);
  return local_->List(context, request, response);
}

grpc::ServerUnaryReactor* PeerService::Stat(grpc::CallbackServerContext* context,
                                            const v1::StatRequest* request,
                                            v1::TensorInfo* response) {
  Count(context);
  return local_->Stat(context, request, response);
}

grpc::ServerUnaryReactor* PeerService::Stats(grpc::CallbackServerContext* context,
                                             const v1::StatsRequest* request,
                                             v1::BrokerStats* response) {
  Count(context);
  return local_->Stats(context, request, response);
}

grpc::ServerUnaryReactor* PeerService::Ping(grpc::CallbackServerContext* context,
                                            const v1::Empty* request, v1::Empty* response) {
  Count(context);
  return local_->Ping(context, request, response);
}

grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionEvent>* PeerService::Session(
    grpc::CallbackServerContext* context) {
  return new FinishedReactor<grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionEvent>>(
      Refuse(context, "Session"));
}

grpc::ServerUnaryReactor* PeerService::Create(grpc::CallbackServerContext* context,
                                              const v1::CreateRequest*, v1::TensorGrant*) {
  return Refused(context, "Create");
}

grpc::ServerUnaryReactor* PeerService::Seal(grpc::CallbackServerContext* context,
                                            const v1::SealRequest*, v1::TensorInfo*) {
  return Refused(context, "Seal");
}

grpc::ServerUnaryReactor* PeerService::Abort(grpc::CallbackServerContext* context,
                                             const v1::AbortRequest*, v1::Empty*) {
  return Refused(context, "Abort");
}

grpc::ServerReadReactor<v1::PutRequest>* PeerService::Put(grpc::CallbackServerContext* context,
                                                          v1::TensorInfo*) {
  return new FinishedReactor<grpc::ServerReadReactor<v1::PutRequest>>(Refuse(context, "Put"));
}

grpc::ServerUnaryReactor* PeerService::Get(grpc::CallbackServerContext* context,
                                           const v1::GetRequest*, v1::TensorGrant*) {
  return Refused(context, "Get");
}

grpc::ServerUnaryReactor* PeerService::Release(grpc::CallbackServerContext* context,
                                               const v1::ReleaseRequest*, v1::Empty*) {
  return Refused(context, "Release");
}

grpc::ServerUnaryReactor* PeerService::Retain(grpc::CallbackServerContext* context,
                                              const v1::RetainRequest*, v1::TensorGrant*) {
  return Refused(context, "Retain");
}

grpc::ServerUnaryReactor* PeerService::Delete(grpc::CallbackServerContext* context,
                                              const v1::DeleteRequest*, v1::Empty*) {
  return Refused(context, "Delete");
}

}  // namespace tensorbroker::daemon
