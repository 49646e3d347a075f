#include "daemon/frontend/grpc/put_reactor.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/cuda_runtime.h"
#include "common/mutex.h"
#include "common/wire/grpc_status.h"
#include "daemon/metrics/call_log.h"
#include "daemon/wire/request_spec.h"
#include "daemon/wire/store_proto.h"

namespace tensorbroker::daemon {

PutReactor::PutReactor(grpc::CallbackServerContext* context, TensorStore* store,
                       const AccessPolicy* policy, DeadlineTimer* timer,
                       absl::Duration pending_timeout, absl::StatusOr<Principal> caller,
                       std::string client, v1::TensorInfo* response)
    : context_(context),
      store_(store),
      policy_(policy),
      timer_(timer),
      caller_(std::move(caller)),
      client_(std::move(client)),
      response_(response) {
  MutexLock lock(shared_->mu);
  if (!caller_.ok()) {
    End(absl::PermissionDeniedError(caller_.status().message()));
    return;
  }
  // Until the header comes, nothing is reserved, but the call would be held all the same.
  header_timer_ = timer_->Schedule(absl::Now() + pending_timeout, [shared = shared_, this] {
    EndFromOutside(
        shared, this, /*only_without_header=*/true, "",
        absl::DeadlineExceededError("header: no Put header within the daemon's pending timeout"));
  });
  StartRead(&message_);
}

void PutReactor::EndFromOutside(const std::shared_ptr<Shared>& shared, PutReactor* reactor,
                                bool only_without_header, const std::string& name,
                                const absl::Status& status) {
  {
    MutexLock lock(shared->mu);
    if (shared->finished || (only_without_header && shared->header_seen)) return;
    shared->finished = true;
  }
  // Not finished until now, so the reactor is alive (gRPC deletes it only after Finish).
  LogCallFailure(
      "Put", [&] { return NameField(name); }, [&] { return reactor->client_; }, status);
  reactor->Finish(ToGrpcStatus(status));
}

absl::Status PutReactor::Begin() {
  if (!message_.has_header()) {
    return absl::InvalidArgumentError("header: the first Put message must carry the header");
  }
  const v1::PutRequest::Header& header = message_.header();
  shared_->header_seen = true;  // OnReadDone holds shared_->mu
  timer_->Cancel(header_timer_);
  name_ = header.name();
  auto spec = MakeSpec(header);
  if (!spec.ok()) return spec.status();
  const std::vector<std::string> readers(header.readers().begin(), header.readers().end());
  if (absl::Status s = policy_->Admit(*caller_, readers, "header.readers", &*spec); !s.ok()) {
    return s;
  }
  // The store calls this from the timer's thread if the stream stalls past the pending
  // timeout. `this` is touched only by whoever claims `finished`, before Finish.
  auto on_expired = [shared = shared_, this, timeout_name = name_] {
    EndFromOutside(
        shared, this, /*only_without_header=*/false, timeout_name,
        absl::DeadlineExceededError(absl::StrCat("name '", timeout_name,
                                                 "': the Put did not finish within the daemon's "
                                                 "pending timeout; its name is free again")));
  };
  auto ticket = store_->BeginPut(*caller_, *spec, std::move(on_expired));
  if (!ticket.ok()) return ticket.status();
  ticket_ = *ticket;
  return absl::OkStatus();
}

absl::Status PutReactor::Append() {
  if (!message_.has_data()) {
    return absl::InvalidArgumentError("header: sent twice; later messages carry data only");
  }
  const std::string& chunk = message_.data();
  if (chunk.size() > ticket_->nbytes - received_) {
    return absl::InvalidArgumentError(absl::StrCat("data: more than the ", ticket_->nbytes,
                                                   " bytes that shape and dtype describe"));
  }
  if (ticket_->device.device_type == kDLCUDA) {
    if (absl::Status s = CudaCopy(ticket_->data + received_, chunk.data(), chunk.size(),
                                  ticket_->device.device_id);
        !s.ok()) {
      return s;
    }
  } else {
    std::memcpy(ticket_->data + received_, chunk.data(), chunk.size());
  }
  received_ += chunk.size();
  return absl::OkStatus();
}

void PutReactor::OnReadDone(bool ok) {
  const std::shared_ptr<Shared> shared = shared_;  // End may lead to this reactor's deletion
  MutexLock lock(shared->mu);
  if (shared->finished) return;
  if (!ok) {
    if (context_->IsCancelled()) {
      End(absl::CancelledError("the client cancelled the Put"));
    } else if (!ticket_.has_value()) {
      End(absl::InvalidArgumentError("header: the first Put message must carry the header"));
    } else if (received_ != ticket_->nbytes) {
      End(absl::InvalidArgumentError(
          absl::StrCat("data: received ", received_, " bytes, expected ", ticket_->nbytes)));
    } else {
      End(absl::OkStatus());
    }
    return;
  }
  if (absl::Status s = ticket_.has_value() ? Append() : Begin(); !s.ok()) {
    End(s);
    return;
  }
  StartRead(&message_);
}

void PutReactor::End(absl::Status status) {
  shared_->finished = true;
  timer_->Cancel(header_timer_);
  if (status.ok() && ticket_.has_value()) {
    auto view = store_->CommitPut(*ticket_);
    ticket_.reset();
    if (view.ok()) {
      LogCallSuccess(
          LogLevel::kDebug, "Put", [&] { return NameField(name_); }, [&] { return client_; },
          [&] { return absl::StrCat("published ", DescribeTensor(*view)); });
      ToProto(*view, response_);
      Finish(grpc::Status::OK);
      return;
    }
    status = view.status();
  }
  if (ticket_.has_value()) {
    store_->CancelPut(*ticket_);
    ticket_.reset();
  }
  LogCallFailure(
      "Put", [&] { return NameField(name_); }, [&] { return client_; }, status);
  Finish(ToGrpcStatus(status));
}

void PutReactor::OnDone() {
  // Finished by the pending timeout: the reservation is aborted; its lease still goes.
  if (ticket_.has_value()) store_->CancelPut(*ticket_);
  delete this;
}

}  // namespace tensorbroker::daemon
