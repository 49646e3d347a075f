#include "daemon/frontend/grpc/broker_service.h"

#include <unistd.h>

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/stats_schema.h"
#include "common/tensor_layout.h"
#include "common/wire/grpc_status.h"
#include "daemon/base/log.h"
#include "daemon/frontend/grpc/put_reactor.h"
#include "daemon/frontend/grpc/read_reactor.h"
#include "daemon/frontend/grpc/waiting_get.h"
#include "daemon/frontend/grpc/watch_reactor.h"
#include "daemon/metrics/call_log.h"
#include "daemon/net/peer_tls.h"
#include "daemon/wire/request_spec.h"
#include "daemon/wire/store_proto.h"

namespace tensorbroker::daemon {
namespace {

// A unary call answered at once.
grpc::ServerUnaryReactor* Answered(grpc::CallbackServerContext* context,
                                   const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

}  // namespace

BrokerService::BrokerService(const ServiceParts& parts) : parts_(parts) {}

std::string BrokerService::Client(const grpc::ServerContextBase* context) const {
  if (!parts_.peers->Lookup(context->peer()).has_value()) {
    const std::vector<std::string> names = PeerNamesOf(*context->auth_context());
    if (!names.empty()) return absl::StrCat("peer=", LogSafe(names.front()), " ", context->peer());
  }
  return parts_.peers->Describe(context->peer());
}

absl::StatusOr<Principal> BrokerService::Caller(const grpc::ServerContextBase* context) const {
  std::optional<PeerCredentials> local = parts_.peers->Lookup(context->peer());
  if (local.has_value()) return parts_.policy->PrincipalOf(*local);
  // Not a connection of the Unix socket: a broker's on --peer-listen, whose certificate gRPC
  // verified in the handshake.
  std::vector<std::string> names = PeerNamesOf(*context->auth_context());
  if (!names.empty()) return PeerPrincipal(std::move(names));
  return absl::PermissionDeniedError(
      "the daemon does not know who is calling (no kernel credentials for the connection)");
}

absl::Status BrokerService::CheckSessionCaller(const grpc::ServerContextBase* context,
                                               const std::string& session_id) const {
  auto caller = Caller(context);
  if (!caller.ok()) return caller.status();
  return parts_.store->CheckSessionUser(session_id, caller->uid);
}

grpc::Status BrokerService::Answer(const grpc::ServerContextBase* context, absl::string_view method,
                                   LogText what, const absl::Status& status) const {
  LogCallFailure(
      method, what, [&] { return Client(context); }, status);
  return ToGrpcStatus(status);
}

void BrokerService::LogSuccess(LogLevel level, const grpc::ServerContextBase* context,
                               absl::string_view method, LogText what, LogText outcome) const {
  LogCallSuccess(
      level, method, what, [&] { return Client(context); }, outcome);
}

grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionEvent>* BrokerService::Session(
    grpc::CallbackServerContext* context) {
  return new SessionReactor(parts_.store, parts_.sessions, Client(context), Caller(context));
}

grpc::ServerUnaryReactor* BrokerService::Create(grpc::CallbackServerContext* context,
                                                const v1::CreateRequest* request,
                                                v1::TensorGrant* response) {
  return Answered(context, DoCreate(context, *request, response));
}

grpc::Status BrokerService::DoCreate(grpc::CallbackServerContext* context,
                                     const v1::CreateRequest& request, v1::TensorGrant* response) {
  auto what = [&] { return NameField(request.name()); };
  auto spec = MakeSpec(request);
  if (!spec.ok()) return Answer(context, "Create", what, spec.status());
  auto caller = Caller(context);
  if (!caller.ok()) return Answer(context, "Create", what, caller.status());
  if (absl::Status s = parts_.store->CheckSessionUser(request.session_id(), caller->uid); !s.ok()) {
    return Answer(context, "Create", what, s);
  }
  const std::vector<std::string> readers(request.readers().begin(), request.readers().end());
  if (absl::Status s = parts_.policy->Admit(*caller, readers, "readers", &*spec); !s.ok()) {
    return Answer(context, "Create", what, s);
  }
  auto grant = parts_.store->Create(request.session_id(), *spec);
  if (!grant.ok()) return Answer(context, "Create", what, grant.status());
  LogSuccess(LogLevel::kDebug, context, "Create", what,
             [&] { return DescribeTensor(grant->info); });
  ToProto(*grant, response);
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* BrokerService::Seal(grpc::CallbackServerContext* context,
                                              const v1::SealRequest* request,
                                              v1::TensorInfo* response) {
  return Answered(context, DoSeal(context, *request, response));
}

grpc::Status BrokerService::DoSeal(grpc::CallbackServerContext* context,
                                   const v1::SealRequest& request, v1::TensorInfo* response) {
  auto what = [&] { return NameField(request.name()); };
  if (absl::Status s = ValidateName(request.name()); !s.ok()) {
    return Answer(context, "Seal", what, s);
  }
  if (absl::Status s = CheckSessionCaller(context, request.session_id()); !s.ok()) {
    return Answer(context, "Seal", what, s);
  }
  auto view = parts_.store->Seal(request.session_id(), request.name());
  if (!view.ok()) return Answer(context, "Seal", what, view.status());
  LogSuccess(LogLevel::kDebug, context, "Seal", what,
             [&] { return absl::StrCat("published ", DescribeTensor(*view)); });
  ToProto(*view, response);
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* BrokerService::Abort(grpc::CallbackServerContext* context,
                                               const v1::AbortRequest* request, v1::Empty*) {
  return Answered(context, DoAbort(context, *request));
}

grpc::Status BrokerService::DoAbort(grpc::CallbackServerContext* context,
                                    const v1::AbortRequest& request) {
  auto what = [&] { return NameField(request.name()); };
  if (absl::Status s = ValidateName(request.name()); !s.ok()) {
    return Answer(context, "Abort", what, s);
  }
  if (absl::Status s = CheckSessionCaller(context, request.session_id()); !s.ok()) {
    return Answer(context, "Abort", what, s);
  }
  absl::Status aborted = parts_.store->Abort(request.session_id(), request.name());
  if (aborted.ok()) LogSuccess(LogLevel::kDebug, context, "Abort", what, [] { return "aborted"; });
  return Answer(context, "Abort", what, aborted);
}

grpc::ServerReadReactor<v1::PutRequest>* BrokerService::Put(grpc::CallbackServerContext* context,
                                                            v1::TensorInfo* response) {
  return new PutReactor(context, parts_.store, parts_.policy, parts_.timer, parts_.pending_timeout,
                        Caller(context), Client(context), response);
}

grpc::ServerWriteReactor<v1::ReadResponse>* BrokerService::Read(
    grpc::CallbackServerContext* context, const v1::ReadRequest* request) {
  return CountedRead(context, request, nullptr);
}

grpc::ServerWriteReactor<v1::ReadResponse>* BrokerService::CountedRead(
    grpc::CallbackServerContext* context, const v1::ReadRequest* request,
    std::atomic<uint64_t>* sent_bytes) {
  return new ReadReactor(parts_.store, Caller(context), Client(context), request->name(),
                         kMaxReadChunkBytes, sent_bytes);
}

grpc::ServerWriteReactor<v1::WatchEvent>* BrokerService::Watch(grpc::CallbackServerContext* context,
                                                               const v1::WatchRequest* request) {
  return new WatchReactor(parts_.store, Caller(context), Client(context), *request);
}

grpc::ServerUnaryReactor* BrokerService::Get(grpc::CallbackServerContext* context,
                                             const v1::GetRequest* request,
                                             v1::TensorGrant* response) {
  const std::string name = request->name();
  auto what = [name] { return NameField(name); };
  if (absl::Status s = ValidateName(name); !s.ok()) {
    return Answered(context, Answer(context, "Get", what, s));
  }
  if (absl::Status s = CheckSessionCaller(context, request->session_id()); !s.ok()) {
    return Answered(context, Answer(context, "Get", what, s));
  }
  absl::Time deadline = absl::InfinitePast();
  if (request->wait_ms() > 0) {
    deadline = std::min(absl::Now() + absl::Milliseconds(request->wait_ms()),
                        absl::FromChrono(context->deadline()));
  }
  // Runs once, on whichever thread answers; `context` and `response` live until the call ends.
  auto answer = [this, context, response, what](absl::StatusOr<TensorGrant> grant) {
    if (!grant.ok()) return Answer(context, "Get", what, grant.status());
    LogSuccess(LogLevel::kDebug, context, "Get", what, [&] {
      return absl::StrCat("lease ", grant->lease_id, " on ", DescribeTensor(grant->info));
    });
    ToProto(*grant, response);
    return grpc::Status::OK;
  };
  auto* reactor = new WaitingGet(parts_.store, parts_.timer, std::move(answer));
  reactor->Start(request->session_id(), name, VersionWantedOf(*request), deadline);
  return reactor;
}

grpc::ServerUnaryReactor* BrokerService::Release(grpc::CallbackServerContext* context,
                                                 const v1::ReleaseRequest* request, v1::Empty*) {
  return Answered(context, DoRelease(context, *request));
}

grpc::Status BrokerService::DoRelease(grpc::CallbackServerContext* context,
                                      const v1::ReleaseRequest& request) {
  auto what = [&] { return absl::StrCat("lease=", request.lease_id()); };
  if (absl::Status s = CheckSessionCaller(context, request.session_id()); !s.ok()) {
    return Answer(context, "Release", what, s);
  }
  absl::Status released = parts_.store->Release(request.session_id(), request.lease_id());
  if (released.ok()) {
    LogSuccess(LogLevel::kDebug, context, "Release", what, [] { return "released"; });
  }
  return Answer(context, "Release", what, released);
}

grpc::ServerUnaryReactor* BrokerService::Retain(grpc::CallbackServerContext* context,
                                                const v1::RetainRequest* request,
                                                v1::TensorGrant* response) {
  return Answered(context, DoRetain(context, *request, response));
}

grpc::Status BrokerService::DoRetain(grpc::CallbackServerContext* context,
                                     const v1::RetainRequest& request, v1::TensorGrant* response) {
  auto what = [&] { return absl::StrCat("lease=", request.lease_id()); };
  if (absl::Status s = CheckSessionCaller(context, request.session_id()); !s.ok()) {
    return Answer(context, "Retain", what, s);
  }
  auto grant = parts_.store->Retain(request.session_id(), request.lease_id());
  if (!grant.ok()) return Answer(context, "Retain", what, grant.status());
  LogSuccess(LogLevel::kDebug, context, "Retain", what, [&] {
    return absl::StrCat("lease ", grant->lease_id, " on ", NameField(grant->info.name));
  });
  ToProto(*grant, response);
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* BrokerService::Delete(grpc::CallbackServerContext* context,
                                                const v1::DeleteRequest* request, v1::Empty*) {
  return Answered(context, DoDelete(context, *request));
}

grpc::Status BrokerService::DoDelete(grpc::CallbackServerContext* context,
                                     const v1::DeleteRequest& request) {
  auto what = [&] { return NameField(request.name()); };
  if (absl::Status s = ValidateName(request.name()); !s.ok()) {
    return Answer(context, "Delete", what, s);
  }
  auto caller = Caller(context);
  if (!caller.ok()) return Answer(context, "Delete", what, caller.status());
  absl::Status deleted = parts_.store->Delete(*caller, request.name());
  if (deleted.ok()) {
    LogSuccess(LogLevel::kDebug, context, "Delete", what, [] { return "unpublished"; });
  }
  return Answer(context, "Delete", what, deleted);
}

grpc::ServerUnaryReactor* BrokerService::List(grpc::CallbackServerContext* context,
                                              const v1::ListRequest* request,
                                              v1::ListResponse* response) {
  return Answered(context, DoList(context, *request, response));
}

grpc::Status BrokerService::DoList(grpc::CallbackServerContext* context,
                                   const v1::ListRequest& request, v1::ListResponse* response) {
  auto what = [&] { return absl::StrCat("prefix=\"", LogSafe(request.prefix()), "\""); };
  if (absl::Status s = ValidatePrefix(request.prefix()); !s.ok()) {
    return Answer(context, "List", what, s);
  }
  if (!request.page_token().empty()) {
    if (absl::Status s = ValidateName(request.page_token(), "page_token"); !s.ok()) {
      return Answer(context, "List", what, s);
    }
  }
  auto caller = Caller(context);
  if (!caller.ok()) return Answer(context, "List", what, caller.status());
  const size_t page_size = request.page_size() == 0
                               ? kDefaultListPage
                               : std::min<size_t>(request.page_size(), kMaxListPage);
  ListPage page = parts_.store->List(*caller, request.prefix(), page_size, request.page_token());
  for (const TensorView& view : page.tensors) ToProto(view, response->add_tensors());
  response->set_next_page_token(page.next_page_token);
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* BrokerService::Stat(grpc::CallbackServerContext* context,
                                              const v1::StatRequest* request,
                                              v1::TensorInfo* response) {
  return Answered(context, DoStat(context, *request, response));
}

grpc::Status BrokerService::DoStat(grpc::CallbackServerContext* context,
                                   const v1::StatRequest& request, v1::TensorInfo* response) {
  auto what = [&] { return NameField(request.name()); };
  if (absl::Status s = ValidateName(request.name()); !s.ok()) {
    return Answer(context, "Stat", what, s);
  }
  auto caller = Caller(context);
  if (!caller.ok()) return Answer(context, "Stat", what, caller.status());
  auto view = parts_.store->Stat(*caller, request.name());
  if (!view.ok()) return Answer(context, "Stat", what, view.status());
  ToProto(*view, response);
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* BrokerService::Stats(grpc::CallbackServerContext* context,
                                               const v1::StatsRequest*, v1::BrokerStats* response) {
  return Answered(context, DoStats(context, response));
}

grpc::Status BrokerService::DoStats(grpc::CallbackServerContext* context,
                                    v1::BrokerStats* response) {
  auto caller = Caller(context);
  if (!caller.ok())
    return Answer(
        context, "Stats", [] { return ""; }, caller.status());
  *response = CurrentStats(*caller);
  return grpc::Status::OK;
}

v1::BrokerStats BrokerService::CurrentStats(const Principal& caller) const {
  StoreStats stats = parts_.store->Stats(caller);
  for (StoreStats::User& user : stats.users) user.user = UserNameOf(user.uid);
  v1::BrokerStats out;
  ToProto(stats, &out);
  if (parts_.metrics != nullptr) {
    for (const MethodCalls& calls : parts_.metrics->Snapshot()) ToProto(calls, out.add_methods());
  }
  if (parts_.peer_traffic != nullptr && caller.admin) {
    for (const PeerTrafficRow& row : parts_.peer_traffic->Snapshot()) {
      v1::PeerUsage* peer = out.add_peers();
      peer->set_peer(row.peer);
      CountersToProto(kPeerStatsRows<PeerTrafficRow>, row, peer);
    }
  }
  return out;
}

grpc::ServerUnaryReactor* BrokerService::Ping(grpc::CallbackServerContext* context,
                                              const v1::Empty*, v1::Empty*) {
  return Answered(context, grpc::Status::OK);
}

}  // namespace tensorbroker::daemon
