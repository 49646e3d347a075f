#include "daemon/remote/grpc_transfer.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/wire/grpc_status.h"
#include "daemon/base/log.h"
#include "daemon/wire/request_spec.h"
#include "tensorbroker/v1/broker.grpc.pb.h"

namespace tensorbroker::daemon {
namespace {

// UNAVAILABLE naming the peer, the tensor and what failed.
absl::Status Unavailable(const std::string& peer, const std::string& name, absl::string_view what) {
  return absl::UnavailableError(absl::StrCat("fetching '", name, "' from peer ", peer, ": ", what));
}

// The peer's answer to a Read that ended badly: NOT_FOUND stays (the peer has no such tensor
// for this broker); anything else is the peer being unavailable.
absl::Status ReadFailed(const std::string& peer, const std::string& name,
                        const grpc::Status& status) {
  if (status.error_code() == grpc::StatusCode::NOT_FOUND) {
    return absl::NotFoundError(absl::StrCat("name '", name, "' is not published at peer ", peer));
  }
  return Unavailable(
      peer, name,
      absl::StrCat(absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())),
                   ": ", LogSafe(status.error_message())));
}

// Why a call the pace cut ended: what the peer sent, and what it should have.
absl::Status TooSlow(const std::string& peer, const std::string& name,
                     const TransferPace::Watched& watch, absl::Duration stall_timeout) {
  return Unavailable(
      peer, name,
      absl::StrCat("too slow: it sent ", watch.Describe(), ", less than ", kStallBytes,
                   " bytes within ", absl::FormatDuration(stall_timeout),
                   " (--fetch-stall-timeout); fetch cut"));
}

// Moves a Read stream's data into `memory`, after `first` (the info message, which may carry
// data too). OK only when exactly memory.size() bytes came and the stream ended well.
absl::Status Receive(grpc::ClientReaderInterface<v1::ReadResponse>* reader,
                     grpc::ClientContext* context, const v1::ReadResponse& first,
                     absl::Span<uint8_t> memory, TransferPace::Watched* watch,
                     const std::string& peer, const std::string& name) {
  uint64_t filled = 0;
  auto take = [&](const std::string& data) {
    if (data.size() > memory.size() - filled) return false;
    std::memcpy(memory.data() + filled, data.data(), data.size());
    filled += data.size();
    watch->Received(data.size());
    return true;
  };
  watch->Expect(memory.size());
  bool fits = take(first.data());
  v1::ReadResponse message;
  while (fits && reader->Read(&message)) fits = take(message.data());
  if (!fits) {
    context->TryCancel();
    (void)reader->Finish();
    return Unavailable(
        peer, name, absl::StrCat("it sent more than the ", memory.size(), " bytes its tensor has"));
  }
  const grpc::Status status = reader->Finish();
  if (!status.ok()) return ReadFailed(peer, name, status);
  if (filled != memory.size()) {
    return Unavailable(
        peer, name, absl::StrCat("its Read ended after ", filled, " of ", memory.size(), " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RemoteTensorInfo> ValidateRemoteInfo(const v1::TensorInfo& info,
                                                    const std::string& name,
                                                    const std::string& peer) {
  if (info.name() != name) {
    return Unavailable(peer, name,
                       absl::StrCat("it answered for another name, '", LogSafe(info.name()), "'"));
  }
  if (info.device().device_type() != kDLCPU) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", name, "' lives in device memory at peer ", peer,
                     ": GPU tensors are not replicated across nodes (a later data plane's work)"));
  }
  if (info.mutable_()) {
    return absl::FailedPreconditionError(absl::StrCat("'", name, "' is mutable at peer ", peer,
                                                      ": mutable tensors are not replicated"));
  }
  v1::PutRequest::Header header;
  header.set_name(name);
  *header.mutable_dtype() = info.dtype();
  *header.mutable_shape() = info.shape();
  auto spec = MakeSpec(header);
  if (!spec.ok()) return Unavailable(peer, name, spec.status().message());
  auto readers = PrincipalSet::Parse({info.readers().begin(), info.readers().end()}, "readers");
  if (!readers.ok()) return Unavailable(peer, name, readers.status().message());
  if (info.version() == 0) return Unavailable(peer, name, "its tensor has no version");
  RemoteTensorInfo remote;
  remote.spec = *std::move(spec);
  remote.version = info.version();
  remote.readers = *std::move(readers);
  remote.owner_uid = info.owner_uid();
  return remote;
}

void GrpcTransfer::CancelAll() { channels_->CancelAll(); }

absl::StatusOr<RemoteTensorInfo> GrpcTransfer::Fetch(const PeerEndpoint& peer,
                                                     const std::string& name,
                                                     const ReplicaSink& sink,
                                                     absl::Duration timeout) {
  auto stub = v1::Broker::NewStub(channels_->ChannelFor(peer));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  auto registered = channels_->Register(&context);
  if (!registered.ok()) return Unavailable(peer.label, name, registered.status().message());
  v1::ReadRequest request;
  request.set_name(name);
  std::unique_ptr<TransferPace::Watched> watch = pace_.Watch(&context);
  std::unique_ptr<grpc::ClientReader<v1::ReadResponse>> reader = stub->Read(&context, request);
  v1::ReadResponse first;
  if (!reader->Read(&first)) {
    const grpc::Status status = reader->Finish();
    if (watch->Cut()) return TooSlow(peer.label, name, *watch, pace_.stall_timeout());
    return ReadFailed(peer.label, name, status);
  }
  watch->Answered();
  absl::StatusOr<RemoteTensorInfo> info =
      first.has_info() ? ValidateRemoteInfo(first.info(), name, peer.label)
                       : Unavailable(peer.label, name, "its first Read message has no info");
  absl::StatusOr<absl::Span<uint8_t>> memory =
      info.ok() ? sink(*info) : absl::StatusOr<absl::Span<uint8_t>>(info.status());
  if (!memory.ok()) {
    context.TryCancel();
    (void)reader->Finish();
    return memory.status();
  }
  absl::Status received =
      Receive(reader.get(), &context, first, *memory, watch.get(), peer.label, name);
  if (!received.ok() && watch->Cut()) {
    return TooSlow(peer.label, name, *watch, pace_.stall_timeout());
  }
  if (!received.ok()) return received;
  return info;
}

}  // namespace tensorbroker::daemon
