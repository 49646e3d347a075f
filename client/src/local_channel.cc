#include "client/src/local_channel.h"

#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/src/fork_guard.h"
#include "common/errno_status.h"
#include "common/fd_passing.h"
#include "common/server_identity.h"

namespace tensorbroker::client_internal {
namespace {}  // namespace

absl::StatusOr<UniqueFd> ConnectLocalChannel(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "local channel path '", path, "' is longer than ", sizeof(address.sun_path) - 1, " bytes"));
  }
  path.copy(address.sun_path, path.size());
  UniqueFd socket(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!socket.valid()) return ErrnoStatus(errno, "socket(AF_UNIX, SOCK_SEQPACKET)");
  if (::connect(socket.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    const int error = errno;
    absl::Status status =
        ErrnoStatus(error, absl::StrCat("connecting to the local channel ", path));
    if (error == ENOENT || error == ECONNREFUSED) {
      return absl::UnavailableError(
          absl::StrCat(status.message(), " (a tensorbrokerd older than this client?)"));
    }
    return status;
  }
  // This very connection carries the session id and the descriptors: its server must be trusted.
  if (absl::Status trusted = CheckServerIdentity(socket.get(), path); !trusted.ok()) {
    return trusted;
  }
  return socket;
}

absl::StatusOr<std::unique_ptr<LocalChannel>> LocalChannel::Attach(const std::string& path,
                                                                   const std::string& session_id,
                                                                   bool* session_unknown) {
  auto socket = ConnectLocalChannel(path);
  if (!socket.ok()) return socket.status();
  std::unique_ptr<LocalChannel> channel(new LocalChannel(*std::move(socket)));
  v1::LocalRequest attach;
  attach.mutable_attach()->set_session_id(session_id);
  auto answer = channel->Call(std::move(attach));
  if (!answer.ok()) {
    // The daemon's own answer (not a transport failure): it knows no such session.
    if (session_unknown != nullptr) *session_unknown = absl::IsFailedPrecondition(answer.status());
    return answer.status();
  }
  return channel;
}

LocalChannel::LocalChannel(UniqueFd socket) : socket_(std::move(socket)) {
  flusher_ = std::thread([this] { FlushLoop(); });
}

LocalChannel::~LocalChannel() {
  {
    MutexLock lock(send_mu_);
    stopping_ = true;
  }
  queued_cv_.notify_all();
  flusher_.join();
  MutexLock lock(send_mu_);
  if (!releases_.empty()) {
    v1::LocalRequest last;
    DrainQueuesLocked(&last);
    (void)SendLocked(last);
  }
}

void LocalChannel::DrainQueuesLocked(v1::LocalRequest* request) {
  for (uint64_t lease : releases_) request->add_release_lease_ids(lease);
  for (std::string& segment : dropped_) request->add_dropped_segments(std::move(segment));
  releases_.clear();
  dropped_.clear();
}

absl::Status LocalChannel::SendLocked(const v1::LocalRequest& request) {
  return SendMessage(socket_.get(), request.SerializeAsString());
}

void LocalChannel::QueueRelease(uint64_t lease_id) {
  // In a forked child the lease is the parent's, and the parent's flusher may have held the
  // lock at the fork: nothing to do, and no lock to take.
  if (InForkedChild()) return;
  bool wake;
  {
    MutexLock lock(send_mu_);
    releases_.push_back(lease_id);
    wake = !flusher_ticking_;
  }
  if (wake) queued_cv_.notify_one();
}

absl::Status LocalChannel::Sync() {
  {
    MutexLock lock(send_mu_);
    // Releases the flusher sent may still be on their way: then a barrier waits for them too.
    if (releases_.empty() && dropped_.empty() && flushed_before_ <= answered_.load()) {
      return absl::OkStatus();
    }
  }
  return Call(v1::LocalRequest()).status();  // a barrier
}

void LocalChannel::QueueDropped(const std::string& segment) {
  if (InForkedChild()) return;  // as QueueRelease
  MutexLock lock(send_mu_);
  dropped_.push_back(segment);
}

void LocalChannel::FlushLoop() {
  MutexLock lock(send_mu_);
  auto last_release = std::chrono::steady_clock::now();
  while (!stopping_) {
    if (releases_.empty() && std::chrono::steady_clock::now() - last_release > kFlusherLinger) {
      flusher_ticking_ = false;  // idle: the next release wakes us
      while (!stopping_ && releases_.empty()) queued_cv_.wait(lock);
      if (stopping_) return;
    }
    flusher_ticking_ = true;
    if (!releases_.empty()) last_release = std::chrono::steady_clock::now();
    // Give the caller's next request the chance to carry them; batch what comes meanwhile.
    const auto until = std::chrono::steady_clock::now() + kReleaseDelay;
    while (!stopping_ && queued_cv_.wait_until(lock, until) != std::cv_status::timeout) {
    }
    if (stopping_ || releases_.empty()) continue;
    v1::LocalRequest request;  // request_id 0: no reply
    DrainQueuesLocked(&request);
    (void)SendLocked(request);
    flushed_before_ = next_request_id_;
  }
}

absl::StatusOr<LocalAnswer> LocalChannel::Call(v1::LocalRequest request) {
  return Call(std::move(request), nullptr);
}

void LocalChannel::CancelWait(uint64_t request_id) {
  v1::LocalRequest request;  // request_id 0: no reply of its own
  request.mutable_cancel()->set_request_id(request_id);
  MutexLock lock(send_mu_);
  DrainQueuesLocked(&request);
  // If it cannot be sent the connection is gone, and with it the wait.
  (void)SendLocked(request);
}

absl::StatusOr<LocalAnswer> LocalChannel::Call(v1::LocalRequest request,
                                               const std::function<void(uint64_t)>& on_sent) {
  if (absl::Status here = UsableHere(); !here.ok()) return here;  // the parent's socket
  uint64_t request_id;
  {
    MutexLock lock(send_mu_);
    request_id = next_request_id_++;
    request.set_request_id(request_id);
    DrainQueuesLocked(&request);
    if (absl::Status sent = SendLocked(request); !sent.ok()) {
      return absl::UnavailableError(absl::StrCat("tensorbrokerd: ", sent.message()));
    }
  }
  if (on_sent) on_sent(request_id);
  auto answer = Await(request_id);
  if (!answer.ok()) return answer.status();
  for (uint64_t seen = answered_.load();
       seen < request_id && !answered_.compare_exchange_weak(seen, request_id);) {
  }
  if (answer->reply.code() != 0) {
    return absl::Status(static_cast<absl::StatusCode>(answer->reply.code()),
                        answer->reply.message());
  }
  if (static_cast<size_t>(answer->reply.descriptors_size()) != answer->fds.size()) {
    return absl::DataLossError(absl::StrCat("daemon sent ", answer->fds.size(), " descriptors for ",
                                            answer->reply.descriptors_size(), " segments"));
  }
  return answer;
}

absl::StatusOr<LocalAnswer> LocalChannel::Await(uint64_t request_id) {
  MutexLock lock(read_mu_);
  while (true) {
    if (auto it = arrived_.find(request_id); it != arrived_.end()) {
      LocalAnswer answer = std::move(it->second);
      arrived_.erase(it);
      return answer;
    }
    if (!broken_.ok()) return broken_;
    if (reading_) {
      read_cv_.wait(lock);
      continue;
    }
    reading_ = true;
    lock.unlock();
    auto received = ReceiveMessage(socket_.get(), kMaxReplyBytes);
    LocalAnswer answer;
    absl::Status failure;
    if (!received.ok()) {
      failure =
          absl::UnavailableError(absl::StrCat("tensorbrokerd: ", received.status().message()));
    } else if (received->closed) {
      failure = absl::UnavailableError("tensorbrokerd closed the local channel");
    } else if (!answer.reply.ParseFromString(received->bytes)) {
      failure = absl::DataLossError("tensorbrokerd sent a reply that is not a LocalReply");
    } else {
      answer.fds = std::move(received->fds);
    }
    lock.lock();
    reading_ = false;
    if (!failure.ok()) {
      broken_ = failure;
    } else if (answer.reply.request_id() != 0) {  // 0: an event (the gRPC session has them too)
      arrived_.emplace(answer.reply.request_id(), std::move(answer));
    }
    read_cv_.notify_all();
  }
}

}  // namespace tensorbroker::client_internal
