#include "daemon/frontend/local/local_connection.h"

#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/fd_passing.h"
#include "common/tensor_layout.h"
#include "common/wire/proto_convert.h"
#include "daemon/base/log.h"
#include "daemon/metrics/call_log.h"
#include "daemon/persistence/handover.h"
#include "daemon/wire/request_spec.h"
#include "daemon/wire/store_proto.h"

namespace tensorbroker::daemon {
namespace {

// SIOCOUTQ of a socket whose client received every message (ReclaimReceived).
constexpr int kReceivedEverything = 1;

void SetStatus(const absl::Status& status, v1::LocalReply* reply) {
  reply->set_code(static_cast<int32_t>(status.code()));
  reply->set_message(std::string(status.message()));
}

// The method a call counts as, named as on the gRPC API.
const char* MethodOf(v1::LocalRequest::CallCase call) {
  switch (call) {
    case v1::LocalRequest::kOpen:
      return "Open";
    case v1::LocalRequest::kAttach:
      return "Attach";
    case v1::LocalRequest::kGet:
      return "Get";
    case v1::LocalRequest::kCreate:
      return "Create";
    case v1::LocalRequest::kSeal:
      return "Seal";
    case v1::LocalRequest::kAbort:
      return "Abort";
    case v1::LocalRequest::kRetain:
      return "Retain";
    case v1::LocalRequest::kFetchSegment:
      return "FetchSegment";
    case v1::LocalRequest::kTakeover:
      return "Takeover";
    case v1::LocalRequest::kCancel:
      return "Cancel";
    case v1::LocalRequest::kWatch:
      return "Watch";
    case v1::LocalRequest::kOpenFastReads:
      return "OpenFastReads";
    case v1::LocalRequest::CALL_NOT_SET:
      break;
  }
  return "Barrier";
}

// What a call is about, for its log line: the tensor's name, or the lease.
std::string SubjectOf(const v1::LocalRequest& request) {
  switch (request.call_case()) {
    case v1::LocalRequest::kGet:
      return NameField(request.get().name());
    case v1::LocalRequest::kWatch:
      return absl::StrCat("prefix=", NameField(request.watch().prefix()).substr(5));
    case v1::LocalRequest::kCreate:
      return NameField(request.create().name());
    case v1::LocalRequest::kSeal:
      return NameField(request.seal().name());
    case v1::LocalRequest::kAbort:
      return NameField(request.abort().name());
    case v1::LocalRequest::kRetain:
      return absl::StrCat("lease=", request.retain().lease_id());
    case v1::LocalRequest::kFetchSegment:
      return absl::StrCat("lease=", request.fetch_segment().lease_id());
    default:
      return "";
  }
}

// DescribeTensor of a reply's tensor.
std::string DescribeInfo(const v1::TensorInfo& info) {
  return DescribeTensor(FromProto(info.dtype()), ToVector(info.shape()), info.nbytes(),
                        FromProto(info.device()));
}

// The log line's outcome of a successful call.
std::string OutcomeOf(v1::LocalRequest::CallCase call, const v1::LocalReply& reply) {
  switch (reply.result_case()) {
    case v1::LocalReply::kGrant: {
      const std::string tensor = DescribeInfo(reply.grant().info());
      if (call == v1::LocalRequest::kCreate) return tensor;
      return absl::StrCat("lease ", reply.grant().lease_id(), " on ", tensor);
    }
    case v1::LocalReply::kInfo:
      return absl::StrCat("published ", DescribeInfo(reply.info()));
    default:
      return call == v1::LocalRequest::kAbort ? "aborted" : "done";
  }
}

}  // namespace

LocalConnection::LocalConnection(uint64_t id, UniqueFd socket, PeerCredentials peer,
                                 const AccessPolicy* policy, TensorStore* store,
                                 LocalConnectionHost* host, CallMetrics* metrics,
                                 DescriptorLedger* ledger)
    : id_(id),
      socket_(std::move(socket)),
      peer_(peer),
      policy_(policy),
      principal_(policy->PrincipalOf(peer_)),
      store_(store),
      host_(host),
      metrics_(metrics),
      ledger_(ledger) {}

LocalConnection::~LocalConnection() {
  // What the client did not receive goes with its socket once it closes its end too.
  ledger_->Refund(peer_.uid, in_flight_);
  for (const auto& [request_id, watcher_id] : watches_) store_->Unwatch(watcher_id);
  for (const auto& [waiter_id, wait] : waits_) {
    store_->CancelWait(waiter_id);
    host_->WaitEnded(id_, waiter_id, wait.deadline);
  }
  if (owns_session_) {
    const TensorStore::SessionCleanup cleanup = store_->CloseSession(session_id_);
    Log(LogLevel::kDebug, "local client disconnected: pid=", peer_.pid, " uid=", peer_.uid,
        " leases_released=", cleanup.leases_released, " pending_aborted=", cleanup.pending_aborted);
  }
}

absl::Status LocalConnection::NeedSession() const {
  if (session_id_.empty()) {
    return absl::FailedPreconditionError("call: open or attach a session first");
  }
  return absl::OkStatus();
}

bool LocalConnection::ReadRequest() {
  auto received = ReceiveMessage(socket_.get(), kMaxLocalRequestBytes, 0);
  if (!received.ok() && absl::IsInvalidArgument(received.status())) {
    // Too long, or descriptors the daemon never takes: refused, the connection serves on.
    return Refuse(received.status());
  }
  if (received.ok() && !received->closed) return HandleRequest(received->bytes);
  // Nothing to read after all (EAGAIN); anything else ends the connection.
  return !received.ok() && absl::IsUnavailable(received.status());
}

bool LocalConnection::HandleRequest(const std::string& bytes) {
  const absl::Time start = absl::Now();
  v1::LocalRequest request;
  v1::LocalReply reply;
  std::vector<PendingDescriptor> descriptors;
  if (!request.ParseFromString(bytes)) {
    SetStatus(absl::InvalidArgumentError("request: not a tensorbroker.v1.LocalRequest"), &reply);
    return Send(std::move(reply));
  }
  // Batched releases first, in order: a Get after them must see them done.
  for (uint64_t lease_id : request.release_lease_ids()) {
    if (session_id_.empty()) break;
    absl::Status released = store_->Release(session_id_, lease_id);
    auto what = [&] { return absl::StrCat("lease=", lease_id); };
    auto client = [&] { return Client(); };
    LogCallFailure("Release", what, client, released);
    if (released.ok())
      LogCallSuccess(LogLevel::kDebug, "Release", what, client, [] { return "released"; });
    if (metrics_ != nullptr) {
      metrics_->Record("Release", static_cast<int>(released.code()), absl::Now() - start, true);
    }
  }
  for (const std::string& segment : request.dropped_segments()) {
    sent_read_only_.erase(segment);
    sent_read_write_.erase(segment);
  }
  if (request.call_case() == v1::LocalRequest::kTakeover) return TakeOver(request.request_id());
  if (request.call_case() == v1::LocalRequest::kCancel) return CancelWait(request);
  if (request.call_case() == v1::LocalRequest::CALL_NOT_SET) {
    // Releases only: no reply wanted (request_id 0), or a barrier: the reply says they are done.
    reply.mutable_empty();
  } else {
    Dispatch(request, &reply, &descriptors);
    // A wait answers later, a watch as its events come.
    if (reply.code() == 0 && reply.result_case() == v1::LocalReply::RESULT_NOT_SET &&
        request.call_case() == v1::LocalRequest::kGet) {
      return true;
    }
    if (reply.code() == 0 && request.call_case() == v1::LocalRequest::kWatch) {
      // Registered: an empty reply says so (every event from now on reaches it), then events.
      reply.set_request_id(request.request_id());
      reply.mutable_empty();
      Account(request.call_case(), SubjectOf(request), reply, start);
      return Send(std::move(reply)) && PumpWatches();
    }
  }
  reply.set_request_id(request.request_id());
  if (request.call_case() != v1::LocalRequest::CALL_NOT_SET) {
    Account(request.call_case(), SubjectOf(request), reply, start);
  }
  if (request.request_id() == 0) return true;
  return Send(std::move(reply), std::move(descriptors));
}

std::string LocalConnection::Client() const {
  return absl::StrCat("pid=", peer_.pid, " uid=", peer_.uid);
}

void LocalConnection::Account(v1::LocalRequest::CallCase call, const std::string& subject,
                              const v1::LocalReply& reply, absl::Time start) {
  const char* method = MethodOf(call);
  if (metrics_ != nullptr) metrics_->Record(method, reply.code(), absl::Now() - start, true);
  auto what = [&] { return subject; };
  auto client = [&] { return Client(); };
  if (reply.code() != 0) {
    LogCallFailure(method, what, client,
                   absl::Status(static_cast<absl::StatusCode>(reply.code()), reply.message()));
  } else {
    LogCallSuccess(LogLevel::kDebug, method, what, client, [&] { return OutcomeOf(call, reply); });
  }
}

void LocalConnection::Dispatch(const v1::LocalRequest& request, v1::LocalReply* reply,
                               std::vector<PendingDescriptor>* descriptors) {
  absl::Status status;
  switch (request.call_case()) {
    case v1::LocalRequest::kOpen:
      status = Open(request.open(), reply);
      break;
    case v1::LocalRequest::kAttach:
      status = Attach(request.attach(), reply);
      break;
    case v1::LocalRequest::kGet:
      status = Get(request.request_id(), request.get(), reply, descriptors);
      break;
    case v1::LocalRequest::kCreate:
      status = Grant(Create(request.create()), reply, descriptors);
      break;
    case v1::LocalRequest::kSeal:
      status = Seal(request.seal(), reply);
      break;
    case v1::LocalRequest::kAbort:
      status = Abort(request.abort(), reply);
      break;
    case v1::LocalRequest::kRetain:
      status = NeedSession();
      if (status.ok()) {
        status =
            Grant(store_->Retain(session_id_, request.retain().lease_id()), reply, descriptors);
      }
      break;
    case v1::LocalRequest::kFetchSegment:
      status = FetchSegment(request.fetch_segment(), reply, descriptors);
      break;
    case v1::LocalRequest::kWatch:
      status = Watch(request.request_id(), request.watch());
      break;
    case v1::LocalRequest::kOpenFastReads:
      status = OpenFastReads(reply, descriptors);
      break;
    case v1::LocalRequest::kTakeover:  // HandleRequest takes these two
    case v1::LocalRequest::kCancel:
      status = absl::InternalError("takeover or cancel");
      break;
    case v1::LocalRequest::CALL_NOT_SET:
      status = absl::InvalidArgumentError("call: not set");
      break;
  }
  if (!status.ok()) SetStatus(status, reply);
}

absl::Status LocalConnection::Open(const v1::LocalRequest::Open& open, v1::LocalReply* reply) {
  if (!session_id_.empty()) {
    return absl::FailedPreconditionError("open: this connection has a session already");
  }
  const auto& hello = open.hello();
  session_id_ =
      host_->OpenOwnedSession(id_, hello.pid(), hello.client_name().substr(0, 128), principal_);
  owns_session_ = true;
  reply->mutable_opened()->set_session_id(session_id_);
  Log(LogLevel::kDebug, "local client opened a session: pid=", peer_.pid, " uid=", peer_.uid);
  return absl::OkStatus();
}

absl::Status LocalConnection::Attach(const v1::LocalRequest::Attach& attach,
                                     v1::LocalReply* reply) {
  if (!session_id_.empty()) {
    return absl::FailedPreconditionError("attach: this connection has a session already");
  }
  if (absl::Status s = store_->CheckSessionUser(attach.session_id(), peer_.uid); !s.ok()) {
    return s;
  }
  session_id_ = attach.session_id();
  reply->mutable_opened()->set_session_id(session_id_);
  return absl::OkStatus();
}

absl::Status LocalConnection::Get(uint64_t request_id, const v1::GetRequest& get,
                                  v1::LocalReply* reply,
                                  std::vector<PendingDescriptor>* descriptors) {
  if (absl::Status s = NeedSession(); !s.ok()) return s;
  if (absl::Status s = ValidateName(get.name()); !s.ok()) return s;
  if (get.wait_ms() != 0 && waits_.size() >= kMaxWaitsPerConnection) {
    return absl::ResourceExhaustedError(
        absl::StrCat("get.wait_ms: this connection has ", kMaxWaitsPerConnection,
                     " Gets waiting already (the most one connection may have)"));
  }
  const absl::Time deadline =
      get.wait_ms() == 0 ? absl::InfinitePast() : absl::Now() + absl::Milliseconds(get.wait_ms());
  uint64_t waiter_id = 0;
  const VersionWanted wanted = VersionWantedOf(get);
  auto now = host_->StartWait(id_, session_id_, get.name(), wanted, deadline, &waiter_id);
  if (!now.has_value()) {
    waits_.emplace(waiter_id, Wait{request_id, absl::Now(), deadline, get.name(), wanted});
    return absl::OkStatus();  // answered by FinishWait; the reply stays empty
  }
  return Grant(*std::move(now), reply, descriptors);
}

absl::StatusOr<TensorGrant> LocalConnection::Create(const v1::CreateRequest& create) {
  if (absl::Status s = NeedSession(); !s.ok()) return s;
  auto spec = MakeSpec(create);
  if (!spec.ok()) return spec.status();
  const std::vector<std::string> readers(create.readers().begin(), create.readers().end());
  if (absl::Status s = policy_->Admit(principal_, readers, "create.readers", &*spec); !s.ok()) {
    return s;
  }
  return store_->Create(session_id_, *spec);
}

absl::Status LocalConnection::Seal(const v1::SealRequest& seal, v1::LocalReply* reply) {
  if (absl::Status s = NeedSession(); !s.ok()) return s;
  if (absl::Status s = ValidateName(seal.name()); !s.ok()) return s;
  auto info = store_->Seal(session_id_, seal.name());
  if (!info.ok()) return info.status();
  host_->AnswerOthersFirst(id_);
  ToProto(*info, reply->mutable_info());
  return absl::OkStatus();
}

absl::Status LocalConnection::Abort(const v1::AbortRequest& abort, v1::LocalReply* reply) {
  if (absl::Status s = NeedSession(); !s.ok()) return s;
  if (absl::Status s = ValidateName(abort.name()); !s.ok()) return s;
  if (absl::Status s = store_->Abort(session_id_, abort.name()); !s.ok()) return s;
  reply->mutable_empty();
  return absl::OkStatus();
}

absl::Status LocalConnection::FetchSegment(const v1::LocalRequest::FetchSegment& fetch,
                                           v1::LocalReply* reply,
                                           std::vector<PendingDescriptor>* descriptors) {
  if (absl::Status s = NeedSession(); !s.ok()) return s;
  auto segment = store_->DescribeSegment(session_id_, fetch.lease_id());
  if (!segment.ok()) return segment.status();
  AttachDescriptor({fetch.lease_id(), segment->segment, segment->writable, std::nullopt},
                   descriptors);
  reply->mutable_empty();
  return absl::OkStatus();
}

absl::Status LocalConnection::OpenFastReads(v1::LocalReply* reply,
                                            std::vector<PendingDescriptor>* descriptors) {
  if (absl::Status s = NeedSession(); !s.ok()) return s;
  if (absl::Status s = store_->OpenFastReads(session_id_); !s.ok()) return s;
  reply->mutable_fast_reads()->set_directory_records(kDirectoryRecords);
  reply->mutable_fast_reads()->set_lease_slots(kLeaseSlotsPerTable);
  for (const FastReadFile file : {FastReadFile::kDirectory, FastReadFile::kLeaseTable}) {
    PendingDescriptor descriptor;
    descriptor.fast_read = file;
    descriptors->push_back(std::move(descriptor));
  }
  return absl::OkStatus();
}

absl::Status LocalConnection::Grant(absl::StatusOr<TensorGrant> grant, v1::LocalReply* reply,
                                    std::vector<PendingDescriptor>* descriptors) {
  if (!grant.ok()) return grant.status();
  ReplyGrant(*grant, reply, descriptors);
  return absl::OkStatus();
}

void LocalConnection::ReplyGrant(const TensorGrant& grant, v1::LocalReply* reply,
                                 std::vector<PendingDescriptor>* descriptors) {
  ToProto(grant, reply->mutable_grant());
  if (grant.block.read_only_fd < 0) return;  // legacy CUDA: the IPC handle is in the region
  const std::set<std::string>& sent = grant.writable ? sent_read_write_ : sent_read_only_;
  if (sent.count(grant.block.segment) > 0) return;
  AttachDescriptor({grant.lease_id, grant.block.segment, grant.writable, std::nullopt},
                   descriptors);
}

void LocalConnection::AttachDescriptor(PendingDescriptor descriptor,
                                       std::vector<PendingDescriptor>* descriptors) {
  (descriptor.writable ? sent_read_write_ : sent_read_only_).insert(descriptor.segment);
  descriptors->push_back(std::move(descriptor));
}

bool LocalConnection::FinishWait(uint64_t waiter_id, absl::StatusOr<TensorGrant> result) {
  auto it = waits_.find(waiter_id);
  if (it == waits_.end()) return true;
  const Wait wait = std::move(it->second);
  waits_.erase(it);
  host_->WaitEnded(id_, waiter_id, wait.deadline);
  v1::LocalReply reply;
  reply.set_request_id(wait.request_id);
  std::vector<PendingDescriptor> descriptors;
  if (result.ok()) {
    ReplyGrant(*result, &reply, &descriptors);
  } else {
    SetStatus(result.status(), &reply);
  }
  Account(v1::LocalRequest::kGet, NameField(wait.name), reply, wait.start);
  return Send(std::move(reply), std::move(descriptors));
}

absl::Status LocalConnection::Watch(uint64_t request_id, const v1::WatchRequest& watch) {
  if (absl::Status s = NeedSession(); !s.ok()) return s;
  if (absl::Status s = ValidatePrefix(watch.prefix(), "watch.prefix"); !s.ok()) return s;
  if (request_id == 0 || watches_.count(request_id) != 0) {
    return absl::InvalidArgumentError("request_id: a watch needs an id of its own (not 0)");
  }
  std::optional<uint64_t> after;
  if (watch.has_after_version()) after = watch.after_version();
  auto watcher = store_->Watch(principal_, watch.prefix(), after, host_->WatchWaker(id_));
  if (!watcher.ok()) return watcher.status();
  watches_[request_id] = *watcher;
  return absl::OkStatus();
}

bool LocalConnection::PumpWatches() {
  for (auto it = watches_.begin(); it != watches_.end();) {
    const uint64_t request_id = it->first;
    const uint64_t watcher_id = it->second;
    ++it;  // EndWatch may erase this one
    while (outgoing_.size() < kWatchWindow) {
      auto events = store_->TakeEvents(watcher_id, kWatchWindow - outgoing_.size());
      if (!events.ok()) {
        if (!EndWatch(request_id, events.status())) return false;
        break;
      }
      if (events->empty()) break;  // parked: the store wakes it
      for (const StoreEvent& event : *events) {
        v1::LocalReply reply;
        reply.set_request_id(request_id);
        ToProto(event, reply.mutable_watch_event());
        if (!Send(std::move(reply))) return false;
      }
    }
  }
  return true;
}

bool LocalConnection::EndWatch(uint64_t request_id, const absl::Status& status) {
  auto it = watches_.find(request_id);
  if (it == watches_.end()) return true;
  store_->Unwatch(it->second);
  watches_.erase(it);
  v1::LocalReply reply;
  reply.set_request_id(request_id);
  SetStatus(status, &reply);
  return Send(std::move(reply));
}

bool LocalConnection::CancelWait(const v1::LocalRequest& request) {
  const uint64_t cancelled = request.cancel().request_id();
  if (watches_.count(cancelled) != 0 &&
      !EndWatch(cancelled, absl::CancelledError("watch: the client cancelled it"))) {
    return false;
  }
  auto it = std::find_if(waits_.begin(), waits_.end(),
                         [&](const auto& entry) { return entry.second.request_id == cancelled; });
  // Not waiting (answered already, or no such Get): nothing to do. CancelWait false: the
  // store answered it meanwhile, and that answer is queued for FinishWait.
  if (it != waits_.end() && store_->CancelWait(it->first)) {
    const uint64_t waiter_id = it->first;
    const std::string message =
        absl::StrCat("get: the client cancelled its wait for ", NameField(it->second.name));
    if (!FinishWait(waiter_id, absl::CancelledError(message))) return false;
  }
  if (request.request_id() == 0) return true;
  v1::LocalReply reply;
  reply.set_request_id(request.request_id());
  reply.mutable_empty();
  return Send(std::move(reply));
}

bool LocalConnection::Refuse(const absl::Status& status) {
  v1::LocalReply reply;
  SetStatus(absl::Status(status.code(), absl::StrCat("request: ", status.message())), &reply);
  return Send(std::move(reply));
}

bool LocalConnection::SegmentRemoved(const std::string& segment) {
  const bool had = sent_read_only_.erase(segment) + sent_read_write_.erase(segment) > 0;
  if (!owns_session_ || !had) return true;
  v1::LocalReply event;
  event.mutable_segment_removed()->set_segment(segment);
  return Send(std::move(event));
}

bool LocalConnection::TakeOver(uint64_t request_id) {
  v1::LocalReply refusal;
  refusal.set_request_id(request_id);
  if (peer_.uid != ::geteuid() && peer_.uid != 0) {
    Log(LogLevel::kWarning, "takeover refused: ", Client(),
        " is neither root nor this daemon's uid");
    SetStatus(absl::PermissionDeniedError(absl::StrCat(
                  "takeover: only root or this daemon's own user (uid ", ::geteuid(), ") may")),
              &refusal);
    return Send(std::move(refusal));
  }
  if (has_session() || !outgoing_.empty()) {
    SetStatus(absl::FailedPreconditionError("takeover: ask on a connection of its own"), &refusal);
    return Send(std::move(refusal));
  }
  Log(LogLevel::kNotice, "takeover requested by ", Client(), ": handing over and exiting");
  auto handed = host_->PrepareHandover(peer_);
  if (!handed.ok()) {
    host_->HandoverSent(handed.status());
    SetStatus(handed.status(), &refusal);
    return Send(std::move(refusal));
  }
  const absl::Status sent = SendHandover(socket_.get(), request_id, *handed, absl::Seconds(30));
  host_->HandoverSent(sent);
  return sent.ok();
}

bool LocalConnection::Send(v1::LocalReply reply, std::vector<PendingDescriptor> descriptors) {
  if (outgoing_.size() >= kMaxQueuedReplies) {
    Log(LogLevel::kWarning, "local client pid=", peer_.pid, " uid=", peer_.uid, " left ",
        kMaxQueuedReplies, " replies unread; disconnecting it");
    return false;
  }
  outgoing_.push_back(Outgoing{std::move(reply), std::move(descriptors)});
  return Flush();
}

bool LocalConnection::Flush() {
  while (!outgoing_.empty()) {
    const Outgoing& next = outgoing_.front();
    stalled_ = !MaySendDescriptors(next.descriptors.size());
    if (stalled_) return true;  // an EPOLLOUT edge (the client read) resumes
    size_t descriptors_sent = 0;
    absl::Status sent = SendNow(next, &descriptors_sent);
    if (absl::IsUnavailable(sent)) return true;  // the socket is full: EPOLLOUT resumes
    if (!sent.ok()) return false;                // the client is gone
    in_flight_ += descriptors_sent;
    ledger_->Charge(peer_.uid, descriptors_sent);
    outgoing_.pop_front();
  }
  return true;
}

absl::Status LocalConnection::SendNow(const Outgoing& next, size_t* descriptors_sent) {
  if (next.descriptors.empty()) {
    return SendMessage(socket_.get(), next.reply.SerializeAsString());
  }
  v1::LocalReply reply = next.reply;
  std::vector<UniqueFd> fds;  // closed (ours) once sent: the client's copies are its own
  std::vector<int> raw;
  for (const PendingDescriptor& wanted : next.descriptors) {
    auto descriptor = wanted.fast_read.has_value()
                          ? store_->FastReadDescriptor(session_id_, *wanted.fast_read)
                          : store_->DescriptorFor(session_id_, wanted.lease_id);
    if (!descriptor.ok()) {
      // The lease or the session went meanwhile: the grant goes without it (the client's
      // FetchSegment says why), and a later grant on the segment sends it again.
      (wanted.writable ? sent_read_write_ : sent_read_only_).erase(wanted.segment);
      continue;
    }
    v1::SegmentDescriptor* out = reply.add_descriptors();
    out->set_segment(descriptor->segment);
    out->set_size(descriptor->size);
    out->set_writable(descriptor->writable);
    out->set_device_type(descriptor->device.device_type);
    raw.push_back(descriptor->fd.get());
    fds.push_back(std::move(descriptor->fd));
  }
  absl::Status sent = SendMessage(socket_.get(), reply.SerializeAsString(), raw);
  if (sent.ok()) *descriptors_sent = fds.size();
  return sent;
}

bool LocalConnection::MaySendDescriptors(size_t count) {
  if (count == 0) return true;
  ReclaimReceived();
  if (ledger_->MaySend(peer_.uid, in_flight_, count)) return true;
  // Over the uid's bound only because its other connections have not counted what their
  // clients received: have them count, then look again.
  if (ledger_->UidAtBound(peer_.uid, count)) host_->ReclaimDescriptors(peer_.uid);
  return ledger_->MaySend(peer_.uid, in_flight_, count);
}

void LocalConnection::ReclaimReceived() {
  if (in_flight_ == 0) return;
  // The bytes the kernel still charges to this socket for messages the client has not
  // received. 1 means none: the kernel wakes the writer for a received message (sock_wfree ->
  // sk_write_space, our EPOLLOUT edge) while it still holds one byte of its charge, and takes
  // that byte off just after; a message queued is charged its whole buffer (hundreds of bytes).
  // Waiting for 0 there could miss the client's last read: no other edge would come.
  int unread = 0;
  if (::ioctl(socket_.get(), SIOCOUTQ, &unread) != 0 || unread > kReceivedEverything) return;
  ledger_->Refund(peer_.uid, in_flight_);
  in_flight_ = 0;
}

}  // namespace tensorbroker::daemon
