#include "client/src/connection.h"

#include <dlpack/dlpack.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/src/cuda_vmm_mapper.h"
#include "client/src/fork_guard.h"
#include "common/server_identity.h"
#include "common/socket_path.h"
#include "common/wire/grpc_status.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace tensorbroker::client_internal {
namespace {
constexpr std::chrono::seconds kUnaryDeadline(60);

}  // namespace

namespace {
// Between two tries of an open whose session and local channel reached different daemons.
constexpr std::chrono::milliseconds kReopenPause(20);
}  // namespace

void Connection::SetDeadline(grpc::ClientContext* context, std::chrono::milliseconds extra) {
  context->set_deadline(std::chrono::system_clock::now() + kUnaryDeadline + extra);
}

bool Connection::Answers() {
  if (session_ended()) return false;
  // A daemon on its way out (a restart, a takeover) still answers calls for a moment, but no
  // longer says SERVING: its UNAVAILABLE means go to the next one.
  auto health = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  return health->Check(&context, request, &response).ok() &&
         response.status() == grpc::health::v1::HealthCheckResponse::SERVING && !session_ended();
}

absl::StatusOr<std::shared_ptr<Connection>> Connection::Open(const std::string& socket_path,
                                                             std::chrono::milliseconds timeout,
                                                             uint64_t client_id) {
  if (absl::Status here = ConnectableHere(); !here.ok()) return here;
  NoteConnecting();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  absl::Status refused;  // the last try's, if the local channel knew no such session
  while (true) {
    const auto left = std::max(std::chrono::milliseconds(0),
                               std::chrono::duration_cast<std::chrono::milliseconds>(
                                   deadline - std::chrono::steady_clock::now()));
    bool attach_refused = false;
    auto opened = OpenOnce(socket_path, left, client_id, &attach_refused);
    if (opened.ok()) return opened;
    const bool out_of_time = std::chrono::steady_clock::now() >= deadline;
    // A try that ran out of time after refusals: the refusal says more than "no answer".
    if (!attach_refused) {
      return out_of_time && !refused.ok() && absl::IsUnavailable(opened.status()) ? refused
                                                                                  : opened.status();
    }
    // FAILED_PRECONDITION from the local channel for the session this client just opened: the
    // two sockets were served by different daemons (a takeover or restart between the two
    // connects). Whichever serves both next will know the session.
    refused = opened.status();
    if (out_of_time) return refused;
    std::this_thread::sleep_for(kReopenPause);
  }
}

absl::StatusOr<std::shared_ptr<Connection>> Connection::OpenOnce(const std::string& socket_path,
                                                                 std::chrono::milliseconds timeout,
                                                                 uint64_t client_id,
                                                                 bool* attach_refused) {
  // gRPC connects by itself, to whatever serves the path then: the server's uid is checked on a
  // plain connection first (and again below if nobody served yet). UNAVAILABLE is worth waiting
  // for; anything else (not allowed, not trusted) is answered at once.
  absl::Status probe = VerifyServerAt(socket_path);
  if (!probe.ok() && !absl::IsUnavailable(probe)) return probe;
  // In a forked child the connection is the parent's: left alone (fork_guard.h).
  std::shared_ptr<Connection> connection(new Connection(), [](Connection* ended) {
    if (!InForkedChild()) delete ended;
  });
  connection->socket_path_ = socket_path;
  connection->client_id_ = client_id;
  grpc::ChannelArguments args;
  // A private connection per Client: its session ends exactly when this Client's does.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // A local daemon that is not there yet (starting, restarting) is tried again soon: gRPC's
  // defaults (1 s growing to 120 s) would keep a client waiting long after it is back.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
  connection->channel_ =
      grpc::CreateCustomChannel("unix:" + socket_path, grpc::InsecureChannelCredentials(), args);
  const auto deadline = std::chrono::system_clock::now() + timeout;
  if (!connection->channel_->WaitForConnected(deadline)) {
    probe = VerifyServerAt(socket_path);
    if (!probe.ok() && !absl::IsUnavailable(probe)) return probe;
    return absl::UnavailableError(
        absl::StrCat("no tensorbrokerd answers on ", socket_path,
                     " (is it running? see --socket / "
                     "$TENSORBROKER_SOCKET)",
                     probe.ok() ? "" : absl::StrCat("; last try: ", probe.message())));
  }
  if (!probe.ok()) {
    // It came up while gRPC waited: nothing is sent before its uid is checked.
    probe = VerifyServerAt(socket_path);
    if (!probe.ok()) return probe;
  }
  connection->stub_ = v1::Broker::NewStub(connection->channel_);
  connection->session_ = connection->stub_->Session(&connection->session_context_);
  v1::SessionRequest hello;
  hello.mutable_hello()->set_pid(::getpid());
  hello.mutable_hello()->set_client_name("libtensorbroker");
  v1::SessionEvent event;
  if (!connection->session_->Write(hello) || !connection->session_->Read(&event) ||
      !event.has_opened()) {
    connection->session_context_.TryCancel();
    absl::Status status = FromGrpcStatus(connection->session_->Finish());
    connection->session_.reset();
    return absl::UnavailableError(
        absl::StrCat("opening a session on ", socket_path, " failed: ", status.ToString()));
  }
  connection->session_id_ = event.opened().session_id();
  auto local =
      LocalChannel::Attach(LocalChannelPath(socket_path), connection->session_id_, attach_refused);
  if (!local.ok()) {
    connection->session_context_.TryCancel();
    (void)connection->session_->Finish();
    connection->session_.reset();
    return local.status();
  }
  connection->local_ = *std::move(local);
  connection->event_reader_ = std::thread([raw = connection.get()] { raw->ReadEvents(); });
  return connection;
}

void Connection::NoteSegment(const std::string& segment) {
  MutexLock lock(segments_mu_);
  segments_.insert(segment);
}

void Connection::ReadEvents() {
  v1::SessionEvent event;
  while (session_->Read(&event)) {
    if (!event.has_segment_removed()) continue;
    const std::string& segment = event.segment_removed().segment();
    mapper().Forget(segment);
    ProcessCudaVmmMapper().Forget(segment);
    local_->QueueDropped(segment);
    MutexLock lock(segments_mu_);
    segments_.erase(segment);
  }
  // The session is over (this Client went away, or the daemon did): no cache entry made for it
  // may outlive it. Tensors still held keep their own mappings.
  session_ended_ = true;
  MutexLock lock(segments_mu_);
  for (const std::string& segment : segments_) {
    mapper().Forget(segment);
    ProcessCudaVmmMapper().Forget(segment);
  }
  segments_.clear();
}

Connection::~Connection() {
  // The releases still queued reach the daemon while the session is open; the channel itself
  // goes after the event reader, which uses it.
  if (local_ != nullptr) (void)local_->Sync();
  if (session_ != nullptr) {
    session_context_.TryCancel();
    if (event_reader_.joinable()) event_reader_.join();
    (void)session_->Finish();
  }
}

void Connection::ReleaseLease(uint64_t lease_id) noexcept { local_->QueueRelease(lease_id); }

absl::Status Connection::AdoptDescriptors(LocalAnswer* answer) {
  for (int i = 0; i < answer->reply.descriptors_size(); ++i) {
    const v1::SegmentDescriptor& descriptor = answer->reply.descriptors(i);
    if (descriptor.device_type() == kDLCUDA) {
      // A VMM slab: kept, and imported and mapped when a tensor in it is (region_mapper.cc).
      ProcessCudaVmmMapper().Adopt(descriptor.segment(), std::move(answer->fds[i]),
                                   descriptor.size());
    } else {
      auto mapped =
          mapper().Adopt(descriptor.segment(), std::move(answer->fds[i]), descriptor.size(),
                         descriptor.writable() ? MapMode::kReadWrite : MapMode::kReadOnly);
      if (!mapped.ok()) return mapped.status();
    }
    NoteSegment(descriptor.segment());
  }
  return absl::OkStatus();
}

void Connection::OpenFastReads() {
  auto opened = FastReads::Open(*local_);
  if (opened.ok()) fast_reads_ = *std::move(opened);
}

absl::Status Connection::FetchDescriptor(uint64_t lease_id) {
  v1::LocalRequest request;
  request.mutable_fetch_segment()->set_lease_id(lease_id);
  auto answer = local_->Call(std::move(request));
  if (!answer.ok()) return answer.status();
  return AdoptDescriptors(&*answer);
}

}  // namespace tensorbroker::client_internal
