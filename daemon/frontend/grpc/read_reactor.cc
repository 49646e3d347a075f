#include "daemon/frontend/grpc/read_reactor.h"

#include <utility>

#include "common/cuda_runtime.h"
#include "common/tensor_layout.h"
#include "common/wire/grpc_status.h"
#include "daemon/base/page_population.h"
#include "daemon/metrics/call_log.h"
#include "daemon/wire/store_proto.h"

namespace tensorbroker::daemon {
namespace {

// From this size a Read maps the tensor's pages in this daemon first, in one call.
constexpr size_t kPopulateAtLeast = size_t{4} << 20;

}  // namespace

ReadReactor::ReadReactor(TensorStore* store, const absl::StatusOr<Principal>& caller,
                         std::string client, const std::string& name, size_t max_chunk,
                         std::atomic<uint64_t>* sent_bytes)
    : store_(store), client_(std::move(client)), name_(name), sent_bytes_(sent_bytes) {
  absl::Status started = ValidateName(name_);
  if (started.ok() && !caller.ok())
    started = absl::PermissionDeniedError(caller.status().message());
  if (started.ok()) started = Begin(*caller, max_chunk);
  if (!started.ok()) {
    End(started);
    return;
  }
  WriteNext();
}

absl::Status ReadReactor::Begin(const Principal& caller, size_t max_chunk) {
  auto ticket = store_->BeginRead(caller, name_);
  if (!ticket.ok()) return ticket.status();
  ticket_ = *std::move(ticket);
  const TensorView& info = ticket_->info;
  ToProto(info, response_.mutable_info());
  const uint8_t* bytes = ticket_->data;
  if (info.device.device_type != kDLCUDA && info.nbytes >= kPopulateAtLeast) {
    PopulateForReading(bytes, info.nbytes);  // this daemon's mapping of a client's pages
  }
  if (info.device.device_type == kDLCUDA) {
    staged_.resize(info.nbytes);
    if (absl::Status s =
            CudaCopy(staged_.data(), ticket_->data, info.nbytes, info.device.device_id);
        !s.ok()) {
      return s;
    }
    bytes = staged_.data();
  }
  shape_ = info.shape;
  strides_ = info.strides;
  DLTensor view{};
  view.data = const_cast<uint8_t*>(bytes);
  view.device = {kDLCPU, 0};
  view.ndim = static_cast<int32_t>(shape_.size());
  view.dtype = info.dtype;
  view.shape = shape_.data();
  view.strides = strides_.data();
  chunker_ = std::make_unique<CompactChunker>(view, max_chunk);
  return absl::OkStatus();
}

void ReadReactor::WriteNext() {
  const absl::Span<const uint8_t> chunk = chunker_->Next();
  if (chunk.empty() && sent_any_) {
    End(absl::OkStatus());
    return;
  }
  // An empty tensor still gets one message, with its info.
  if (chunk.empty()) {
    response_.clear_data();
  } else {
    response_.set_data(chunk.data(), chunk.size());
  }
  if (sent_any_) response_.clear_info();
  sent_any_ = true;
  StartWrite(&response_);
}

void ReadReactor::OnWriteDone(bool ok) {
  if (!ok) {
    End(absl::CancelledError("client stopped reading"));
    return;
  }
  if (sent_bytes_ != nullptr)
    sent_bytes_->fetch_add(response_.data().size(), std::memory_order_relaxed);
  WriteNext();
}

void ReadReactor::End(const absl::Status& status) {
  if (status.ok()) {
    LogCallSuccess(
        LogLevel::kDebug, "Read", [&] { return NameField(name_); }, [&] { return client_; },
        [&] { return DescribeTensor(ticket_->info); });
  } else {
    LogCallFailure(
        "Read", [&] { return NameField(name_); }, [&] { return client_; }, status);
  }
  // The lease goes before the status does: a caller who has seen the stream end sees it gone.
  ReleaseTicket();
  Finish(ToGrpcStatus(status));
}

void ReadReactor::ReleaseTicket() {
  if (!ticket_.has_value()) return;
  store_->EndRead(ticket_->lease_id);
  ticket_.reset();
}

void ReadReactor::OnDone() {
  ReleaseTicket();
  delete this;
}

}  // namespace tensorbroker::daemon
