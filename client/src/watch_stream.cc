#include "client/src/watch_stream.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/src/fork_guard.h"
#include "client/src/local_channel.h"
#include "common/errno_status.h"
#include "common/fd_passing.h"
#include "common/socket_path.h"
#include "common/wire/proto_convert.h"
#include "tensorbroker/v1/local.pb.h"

namespace tensorbroker::client_internal {
namespace {

constexpr uint64_t kAttachId = 1;
constexpr uint64_t kWatchId = 2;
// How long Start waits for the daemon to answer the attach, and then the watch.
constexpr std::chrono::seconds kAttachTimeout{10};

absl::Status SendRequest(int socket, const v1::LocalRequest& request) {
  return SendMessage(socket, request.SerializeAsString(), {});
}

// The next reply (the socket is readable); UNAVAILABLE when the daemon closed the socket.
absl::StatusOr<v1::LocalReply> ReadReply(int socket) {
  auto received = ReceiveMessage(socket, kMaxReplyBytes, 0);
  if (!received.ok()) return received.status();
  if (received->closed)
    return absl::UnavailableError("tensorbrokerd closed the watch's connection");
  v1::LocalReply reply;
  if (!reply.ParseFromString(received->bytes)) {
    return absl::InternalError("watch: the daemon's reply is not a tensorbroker.v1.LocalReply");
  }
  return reply;
}

}  // namespace

absl::StatusOr<std::unique_ptr<WatchStream>> WatchStream::Open(
    std::shared_ptr<Connection> connection, std::string prefix, const WatchOptions& options,
    Reconnect reconnect) {
  UniqueFd closed(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!closed.valid()) return ErrnoStatus(errno, "eventfd for a watch");
  std::unique_ptr<WatchStream> stream(new WatchStream(std::move(connection), std::move(prefix),
                                                      options.after_version, std::move(reconnect),
                                                      std::move(closed)));
  if (absl::Status started = stream->Start(); !started.ok()) return started;
  return stream;
}

WatchStream::WatchStream(std::shared_ptr<Connection> connection, std::string prefix,
                         std::optional<uint64_t> after, Reconnect reconnect, UniqueFd closed)
    : connection_(std::move(connection)),
      prefix_(std::move(prefix)),
      after_(after),
      reconnect_(std::move(reconnect)),
      closed_(std::move(closed)) {}

absl::Status WatchStream::Start() {
  auto socket = ConnectLocalChannel(LocalChannelPath(connection_->socket_path()));
  if (!socket.ok()) return socket.status();
  {
    MutexLock lock(socket_mu_);
    if (closing_.load()) return absl::CancelledError("watch: closed");
    socket_ = *std::move(socket);
  }
  v1::LocalRequest attach;
  attach.set_request_id(kAttachId);
  attach.mutable_attach()->set_session_id(connection_->session_id());
  if (absl::Status attached = Ask(attach, "attach"); !attached.ok()) return attached;
  v1::LocalRequest watch;
  watch.set_request_id(kWatchId);
  watch.mutable_watch()->set_prefix(prefix_);
  if (after_.has_value()) watch.mutable_watch()->set_after_version(*after_);
  // Registered once the daemon says so: from then on no event is missed.
  return Ask(watch, "watch");
}

absl::Status WatchStream::Ask(const v1::LocalRequest& request, const char* what) {
  if (absl::Status sent = SendRequest(socket_.get(), request); !sent.ok()) return sent;
  auto readable = WaitReadable(std::chrono::steady_clock::now() + kAttachTimeout, false);
  if (!readable.ok()) return readable.status();
  if (!*readable) {
    return absl::DeadlineExceededError(absl::StrCat("watch: the daemon did not answer the ", what));
  }
  auto reply = ReadReply(socket_.get());
  if (!reply.ok()) return reply.status();
  return absl::Status(static_cast<absl::StatusCode>(reply->code()), reply->message());
}

absl::Status WatchStream::Resume() {
  if (!reconnect_) return absl::UnavailableError("tensorbrokerd went away");
  auto fresh = reconnect_(connection_);
  if (!fresh.ok()) return fresh.status();
  connection_ = *std::move(fresh);
  // From after the last event seen (or what was asked first): the new daemon's log does not go
  // back that far, so a kLost says what may have been missed meanwhile.
  after_ = std::max(last_sequence_, after_.value_or(0));
  return Start();
}

absl::StatusOr<bool> WatchStream::WaitReadable(std::chrono::steady_clock::time_point deadline,
                                               bool forever) {
  while (true) {
    if (closing_.load()) return absl::CancelledError("watch: closed");
    int timeout_ms = -1;
    if (!forever) {
      const auto left =
          std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      timeout_ms = static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(left.count(), 1 << 30)));
    }
    pollfd fds[2] = {{socket_.get(), POLLIN, 0}, {closed_.get(), POLLIN, 0}};
    const int ready = ::poll(fds, 2, timeout_ms);
    if (ready < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "poll on a watch");
    }
    if ((fds[1].revents & POLLIN) != 0) return absl::CancelledError("watch: closed");
    if (fds[0].revents != 0) return true;
    if (ready == 0) return false;
  }
}

absl::StatusOr<std::optional<WatchEvent>> WatchStream::Next(std::chrono::milliseconds timeout) {
  if (absl::Status here = UsableHere(); !here.ok()) return here;  // the parent's socket
  const bool forever = timeout.count() < 0;
  const auto deadline =
      std::chrono::steady_clock::now() + std::max(timeout, std::chrono::milliseconds(0));
  while (true) {
    auto readable = WaitReadable(deadline, forever);
    if (!readable.ok()) return readable.status();
    if (!*readable) return std::nullopt;
    auto reply = ReadReply(socket_.get());
    if (reply.ok() && reply->request_id() != kWatchId) continue;  // not ours (segment events)
    absl::Status ended =
        reply.ok() ? absl::Status(static_cast<absl::StatusCode>(reply->code()), reply->message())
                   : reply.status();
    if (reply.ok() && reply->has_watch_event()) {
      WatchEvent event = FromProto(reply->watch_event());
      last_sequence_ = event.sequence;
      return event;
    }
    if (closing_.load()) return absl::CancelledError("watch: closed");
    // The daemon went away (or is going): watch again on the one that answers now.
    if (!absl::IsUnavailable(ended)) return ended;
    if (absl::Status resumed = Resume(); !resumed.ok()) return resumed;
  }
}

void WatchStream::Close() {
  // In a forked child the socket and the eventfd are the parent's too, and a lock may have been
  // held at the fork: leave them alone (fork_guard.h).
  if (InForkedChild()) return;
  closing_.store(true);
  const uint64_t one = 1;
  (void)!::write(closed_.get(), &one, sizeof(one));
  MutexLock lock(socket_mu_);
  // The daemon sees the connection end and drops the watch now; the descriptor itself closes
  // with this object (another thread's Next may still be polling it).
  if (socket_.valid()) ::shutdown(socket_.get(), SHUT_RDWR);
}

}  // namespace tensorbroker::client_internal
