#include "daemon/broker_service.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/dtype_names.h"
#include "common/cuda_runtime.h"
#include "common/grpc_status.h"
#include "common/proto_convert.h"
#include "common/strided_copy.h"
#include "common/tensor_layout.h"
#include "daemon/call_log.h"
#include "daemon/log.h"
#include "daemon/request_device.h"
#include "daemon/request_spec.h"

namespace tensorbroker::daemon {
namespace {

}  // namespace

BrokerService::BrokerService(TensorStore* store, SessionRegistry* sessions,
                             const CallMetrics* metrics, const PeerRegistry* peers)
    : store_(store), metrics_(metrics), sessions_(sessions), peers_(peers) {}

std::string BrokerService::Client(const grpc::ServerContextBase* context) const {
  return peers_ == nullptr ? std::string("pid=? uid=?") : peers_->Describe(context->peer());
}

std::optional<uint32_t> BrokerService::CallerUid(const grpc::ServerContextBase* context) const {
  if (peers_ == nullptr) return std::nullopt;
  std::optional<PeerCredentials> peer = peers_->Lookup(context->peer());
  if (!peer.has_value()) return std::nullopt;
  return static_cast<uint32_t>(peer->uid);
}

absl::Status BrokerService::CheckSessionCaller(const grpc::ServerContextBase* context,
                                               const std::string& session_id) const {
  std::optional<uint32_t> uid = CallerUid(context);
  return uid.has_value() ? store_->CheckSessionUser(session_id, *uid) : absl::OkStatus();
}

grpc::Status BrokerService::Answer(const grpc::ServerContextBase* context,
                                   absl::string_view method, LogText what,
                                   const absl::Status& status) const {
  LogCallFailure(method, what, [&] { return Client(context); }, status);
  return ToGrpcStatus(status);
}

void BrokerService::LogSuccess(LogLevel level, const grpc::ServerContextBase* context,
                               absl::string_view method, LogText what, LogText outcome) const {
  LogCallSuccess(level, method, what, [&] { return Client(context); }, outcome);
}

grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionEvent>* BrokerService::Session(
    grpc::CallbackServerContext* context) {
  return new SessionReactor(store_, sessions_, Client(context), CallerUid(context));
}

grpc::Status BrokerService::Create(grpc::ServerContext* context, const v1::CreateRequest* request,
                                   v1::TensorGrant* response) {
  auto what = [&] { return NameField(request->name()); };
  auto spec = MakeSpec(*request);
  if (!spec.ok()) return Answer(context, "Create", what, spec.status());
  if (absl::Status s = CheckSessionCaller(context, request->session_id()); !s.ok()) {
    return Answer(context, "Create", what, s);
  }
  auto grant = store_->Create(request->session_id(), *spec);
  if (!grant.ok()) return Answer(context, "Create", what, grant.status());
  LogSuccess(LogLevel::kDebug, context, "Create", what, [&] { return DescribeTensor(grant->info); });
  ToProto(*grant, response);
  return grpc::Status::OK;
}

grpc::Status BrokerService::Seal(grpc::ServerContext* context, const v1::SealRequest* request,
                                 v1::TensorInfo* response) {
  auto what = [&] { return NameField(request->name()); };
  if (absl::Status s = ValidateName(request->name()); !s.ok()) {
    return Answer(context, "Seal", what, s);
  }
  if (absl::Status s = CheckSessionCaller(context, request->session_id()); !s.ok()) {
    return Answer(context, "Seal", what, s);
  }
  auto view = store_->Seal(request->session_id(), request->name());
  if (!view.ok()) return Answer(context, "Seal", what, view.status());
  LogSuccess(LogLevel::kDebug, context, "Seal", what,
             [&] { return absl::StrCat("published ", DescribeTensor(*view)); });
  ToProto(*view, response);
  return grpc::Status::OK;
}

grpc::Status BrokerService::Abort(grpc::ServerContext* context, const v1::AbortRequest* request,
                                  v1::Empty*) {
  auto what = [&] { return NameField(request->name()); };
  if (absl::Status s = ValidateName(request->name()); !s.ok()) {
    return Answer(context, "Abort", what, s);
  }
  if (absl::Status s = CheckSessionCaller(context, request->session_id()); !s.ok()) {
    return Answer(context, "Abort", what, s);
  }
  absl::Status aborted = store_->Abort(request->session_id(), request->name());
  if (aborted.ok()) LogSuccess(LogLevel::kDebug, context, "Abort", what, [] { return "aborted"; });
  return Answer(context, "Abort", what, aborted);
}

grpc::Status BrokerService::Put(grpc::ServerContext* context,
                                grpc::ServerReader<v1::PutRequest>* reader,
                                v1::TensorInfo* response) {
  v1::PutRequest message;
  if (!reader->Read(&message) || !message.has_header()) {
    return Answer(context, "Put", [] { return std::string(); }, absl::InvalidArgumentError(
                                          "header: the first Put message must carry the header"));
  }
  const v1::PutRequest::Header& header = message.header();
  auto what = [&] { return NameField(header.name()); };
  auto spec = MakeSpec(header.name(), header.dtype(), header.shape(), {}, 0, header.mutable_(),
                       header.replace(), header.has_device(), header.device());
  if (!spec.ok()) return Answer(context, "Put", what, spec.status());
  spec->owner_uid = CallerUid(context).value_or(static_cast<uint32_t>(::getuid()));
  auto ticket = store_->BeginPut(*spec);
  if (!ticket.ok()) return Answer(context, "Put", what, ticket.status());
  uint64_t received = 0;
  absl::Status failure;
  while (reader->Read(&message)) {
    if (!message.has_data() && message.has_header()) {
      failure = absl::InvalidArgumentError("header: sent twice; later messages carry data only");
      break;
    }
    const std::string& chunk = message.data();
    if (chunk.size() > ticket->nbytes - received) {
      failure = absl::InvalidArgumentError(absl::StrCat(
          "data: more than the ", ticket->nbytes, " bytes that shape and dtype describe"));
      break;
    }
    if (ticket->device.device_type == kDLCUDA) {
      failure = CudaCopy(ticket->data + received, chunk.data(), chunk.size(),
                         ticket->device.device_id);
      if (!failure.ok()) break;
    } else {
      std::memcpy(ticket->data + received, chunk.data(), chunk.size());
    }
    received += chunk.size();
  }
  if (failure.ok() && received != ticket->nbytes) {
    failure = absl::InvalidArgumentError(absl::StrCat("data: received ", received,
                                                      " bytes, expected ", ticket->nbytes));
  }
  if (!failure.ok()) {
    store_->CancelPut(ticket->object_id);
    return Answer(context, "Put", what, failure);
  }
  auto view = store_->CommitPut(ticket->object_id);
  if (!view.ok()) return Answer(context, "Put", what, view.status());
  LogSuccess(LogLevel::kDebug, context, "Put", what,
             [&] { return absl::StrCat("published ", DescribeTensor(*view)); });
  ToProto(*view, response);
  return grpc::Status::OK;
}

grpc::Status BrokerService::Read(grpc::ServerContext* context, const v1::ReadRequest* request,
                                 grpc::ServerWriter<v1::ReadResponse>* writer) {
  auto what = [&] { return NameField(request->name()); };
  if (absl::Status s = ValidateName(request->name()); !s.ok()) {
    return Answer(context, "Read", what, s);
  }
  auto ticket = store_->BeginRead(request->name());
  if (!ticket.ok()) return Answer(context, "Read", what, ticket.status());
  const TensorInfo& info = ticket->info;
  v1::ReadResponse response;
  ToProto(info, response.mutable_info());
  // Device memory is staged through the host first.
  std::vector<uint8_t> staged;
  const uint8_t* bytes = ticket->data;
  if (info.device.device_type == kDLCUDA) {
    staged.resize(info.nbytes);
    if (absl::Status s = CudaCopy(staged.data(), ticket->data, info.nbytes, info.device.device_id);
        !s.ok()) {
      store_->EndRead(ticket->lease_id);
      return Answer(context, "Read", what, s);
    }
    bytes = staged.data();
  }
  // Compact C order whatever the stored layout.
  DLTensor view{};
  view.data = const_cast<uint8_t*>(bytes);
  view.device = {kDLCPU, 0};
  view.ndim = static_cast<int32_t>(info.shape.size());
  view.dtype = info.dtype;
  view.shape = const_cast<int64_t*>(info.shape.data());
  view.strides = const_cast<int64_t*>(info.strides.data());
  bool sent_any = false;
  const bool ok = StreamCompact(view, kMaxChunkBytes, [&](const uint8_t* data, size_t size) {
    response.set_data(data, size);
    sent_any = true;
    const bool written = writer->Write(response);
    response.clear_info();
    return written && !context->IsCancelled();
  });
  // An empty tensor still gets its info.
  const bool finished = ok && (sent_any || writer->Write(response));
  store_->EndRead(ticket->lease_id);
  if (!finished) {
    return Answer(context, "Read", what, absl::CancelledError("client stopped reading"));
  }
  LogSuccess(LogLevel::kDebug, context, "Read", what, [&] { return DescribeTensor(info); });
  return grpc::Status::OK;
}

grpc::Status BrokerService::Get(grpc::ServerContext* context, const v1::GetRequest* request,
                                v1::TensorGrant* response) {
  auto what = [&] { return NameField(request->name()); };
  if (absl::Status s = ValidateName(request->name()); !s.ok()) {
    return Answer(context, "Get", what, s);
  }
  if (absl::Status s = CheckSessionCaller(context, request->session_id()); !s.ok()) {
    return Answer(context, "Get", what, s);
  }
  absl::Time deadline = absl::InfinitePast();
  if (request->wait_ms() > 0) {
    deadline = std::min(absl::Now() + absl::Milliseconds(request->wait_ms()),
                        absl::FromChrono(context->deadline()));
  }
  auto grant = store_->Get(request->session_id(), request->name(), deadline);
  if (!grant.ok()) return Answer(context, "Get", what, grant.status());
  LogSuccess(LogLevel::kDebug, context, "Get", what, [&] {
    return absl::StrCat("lease ", grant->lease_id, " on ", DescribeTensor(grant->info));
  });
  ToProto(*grant, response);
  return grpc::Status::OK;
}

grpc::Status BrokerService::Release(grpc::ServerContext* context,
                                    const v1::ReleaseRequest* request, v1::Empty*) {
  auto what = [&] { return absl::StrCat("lease=", request->lease_id()); };
  if (absl::Status s = CheckSessionCaller(context, request->session_id()); !s.ok()) {
    return Answer(context, "Release", what, s);
  }
  absl::Status released = store_->Release(request->session_id(), request->lease_id());
  if (released.ok()) LogSuccess(LogLevel::kDebug, context, "Release", what, [] { return "released"; });
  return Answer(context, "Release", what, released);
}

grpc::Status BrokerService::Retain(grpc::ServerContext* context, const v1::RetainRequest* request,
                                   v1::TensorGrant* response) {
  auto what = [&] { return absl::StrCat("lease=", request->lease_id()); };
  if (absl::Status s = CheckSessionCaller(context, request->session_id()); !s.ok()) {
    return Answer(context, "Retain", what, s);
  }
  auto grant = store_->Retain(request->session_id(), request->lease_id());
  if (!grant.ok()) return Answer(context, "Retain", what, grant.status());
  LogSuccess(LogLevel::kDebug, context, "Retain", what, [&] {
    return absl::StrCat("lease ", grant->lease_id, " on ", NameField(grant->info.name));
  });
  ToProto(*grant, response);
  return grpc::Status::OK;
}

grpc::Status BrokerService::Delete(grpc::ServerContext* context, const v1::DeleteRequest* request,
                                   v1::Empty*) {
  auto what = [&] { return NameField(request->name()); };
  if (absl::Status s = ValidateName(request->name()); !s.ok()) {
    return Answer(context, "Delete", what, s);
  }
  absl::Status deleted = store_->Delete(request->name());
  if (deleted.ok()) LogSuccess(LogLevel::kDebug, context, "Delete", what, [] { return "unpublished"; });
  return Answer(context, "Delete", what, deleted);
}

grpc::Status BrokerService::List(grpc::ServerContext* context, const v1::ListRequest* request,
                                 v1::ListResponse* response) {
  auto what = [&] { return absl::StrCat("prefix=\"", LogSafe(request->prefix()), "\""); };
  if (absl::Status s = ValidatePrefix(request->prefix()); !s.ok()) {
    return Answer(context, "List", what, s);
  }
  for (const TensorInfo& view : store_->List(request->prefix())) {
    ToProto(view, response->add_tensors());
  }
  return grpc::Status::OK;
}

grpc::Status BrokerService::Stat(grpc::ServerContext* context, const v1::StatRequest* request,
                                 v1::TensorInfo* response) {
  auto what = [&] { return NameField(request->name()); };
  if (absl::Status s = ValidateName(request->name()); !s.ok()) {
    return Answer(context, "Stat", what, s);
  }
  auto view = store_->Stat(request->name());
  if (!view.ok()) return Answer(context, "Stat", what, view.status());
  ToProto(*view, response);
  return grpc::Status::OK;
}

grpc::Status BrokerService::Stats(grpc::ServerContext*, const v1::StatsRequest*,
                                  v1::BrokerStats* response) {
  ToProto(CurrentStats(), response);
  return grpc::Status::OK;
}

BrokerStats BrokerService::CurrentStats() const {
  BrokerStats stats = store_->Stats();
  if (metrics_ != nullptr) stats.methods = metrics_->Snapshot();
  return stats;
}

grpc::Status BrokerService::Ping(grpc::ServerContext*, const v1::Empty*, v1::Empty*) {
  return grpc::Status::OK;
}

}  // namespace tensorbroker::daemon
