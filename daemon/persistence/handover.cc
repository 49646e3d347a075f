#include "daemon/persistence/handover.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/errno_status.h"
#include "common/fd_passing.h"
#include "daemon/identity/peer_registry.h"
#include "daemon/memory/memfd_segment.h"
#include "daemon/persistence/fd_store_journal.h"
#include "daemon/persistence/tensor_record.h"
#include "tensorbroker/v1/local.pb.h"

namespace tensorbroker::daemon {
namespace {

constexpr size_t kMaxHandoverReply = 64 << 10;

// Waits until `fd` is ready for `events` or `deadline` passes.
absl::Status WaitFor(int fd, short events, absl::Time deadline, const char* what) {
  while (true) {
    const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left <= 0) return absl::DeadlineExceededError(absl::StrCat("takeover: ", what));
    pollfd p{fd, events, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (ready > 0) return absl::OkStatus();
    if (ready < 0 && errno != EINTR) return ErrnoStatus(errno, "takeover: poll");
  }
}

}  // namespace

void HandoverCollector::SegmentCreated(const MemfdSegment& segment) {
  Add(SegmentFdName(segment.name()), segment.read_write_fd());
}

void HandoverCollector::SegmentRemoved(const std::string& segment) { Drop(SegmentFdName(segment)); }

void HandoverCollector::CudaSlabCreated(const std::string& slab, int fd) {
  Add(CudaSlabFdName(slab), fd);
}

void HandoverCollector::CudaSlabRemoved(const std::string& slab) { Drop(CudaSlabFdName(slab)); }

void HandoverCollector::TensorPublished(const JournaledTensor& tensor) {
  const v1::TensorRecord record = TensorRecordOf(tensor);
  auto fd = WriteTensorRecord(record);
  if (!fd.ok()) {
    if (status_.ok()) status_ = fd.status();
    return;
  }
  fds_.push_back({RecordFdName(record.info().version()), *std::move(fd)});
}

void HandoverCollector::TensorUnpublished(uint64_t version) { Drop(RecordFdName(version)); }

void HandoverCollector::Drop(const std::string& name) {
  fds_.erase(
      std::remove_if(fds_.begin(), fds_.end(), [&](const NamedFd& fd) { return fd.name == name; }),
      fds_.end());
}

void HandoverCollector::Add(const std::string& name, int fd) {
  UniqueFd copy(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
  if (!copy.valid()) {
    if (status_.ok()) status_ = ErrnoStatus(errno, absl::StrCat("takeover: duplicating ", name));
    return;
  }
  fds_.push_back({name, std::move(copy)});
}

absl::Status SendHandover(int socket, uint64_t request_id, const std::vector<NamedFd>& fds,
                          absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  size_t next = 0;
  do {
    v1::LocalReply reply;
    reply.set_request_id(request_id);
    v1::HandedOver& batch = *reply.mutable_handed_over();
    std::vector<int> raw;
    for (; next < fds.size() && raw.size() < kMaxFdsPerMessage; ++next) {
      batch.add_names(fds[next].name);
      raw.push_back(fds[next].fd.get());
    }
    batch.set_last(next == fds.size());
    const std::string bytes = reply.SerializeAsString();
    while (true) {
      absl::Status sent = SendMessage(socket, bytes, raw);
      if (sent.ok()) break;
      if (!absl::IsUnavailable(sent)) return sent;  // EAGAIN: the new daemon is still reading
      if (absl::Status ready = WaitFor(socket, POLLOUT, deadline, "the new daemon stopped reading");
          !ready.ok()) {
        return ready;
      }
    }
  } while (next < fds.size());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<NamedFd>> RequestTakeover(const std::string& local_path,
                                                     absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  auto refused = [&](absl::string_view why) {
    return absl::FailedPreconditionError(
        absl::StrCat("--takeover: no daemon to take over on ", local_path, ": ", why));
  };
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (local_path.size() >= sizeof(address.sun_path)) return refused("the path is too long");
  std::memcpy(address.sun_path, local_path.c_str(), local_path.size() + 1);
  UniqueFd socket(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!socket.valid()) return ErrnoStatus(errno, "--takeover: socket");
  if (::connect(socket.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    return refused(std::strerror(errno));
  }
  std::optional<PeerCredentials> peer = PeerCredentialsOf(socket.get(), "takeover");
  if (!peer.has_value()) return refused("its credentials cannot be read");
  if (peer->uid != ::geteuid() && peer->uid != 0) {
    return refused(absl::StrCat("it runs as uid ", peer->uid, ", not as this process (uid ",
                                ::geteuid(), ") or root"));
  }
  v1::LocalRequest request;
  request.set_request_id(1);
  request.mutable_takeover();
  if (absl::Status sent = SendMessage(socket.get(), request.SerializeAsString()); !sent.ok()) {
    return sent;
  }
  std::vector<NamedFd> handed;
  while (true) {
    if (absl::Status ready =
            WaitFor(socket.get(), POLLIN, deadline, "the running daemon did not hand over in time");
        !ready.ok()) {
      return ready;
    }
    auto message = ReceiveMessage(socket.get(), kMaxHandoverReply);
    if (!message.ok()) return message.status();
    if (message->closed) {
      return absl::UnavailableError("--takeover: the running daemon closed the connection");
    }
    v1::LocalReply reply;
    if (!reply.ParseFromString(message->bytes) || reply.request_id() != 1) continue;
    if (reply.code() != 0) {
      return absl::Status(
          static_cast<absl::StatusCode>(reply.code()),
          absl::StrCat("--takeover: the running daemon refused: ", reply.message()));
    }
    if (!reply.has_handed_over() ||
        static_cast<size_t>(reply.handed_over().names_size()) != message->fds.size()) {
      return absl::DataLossError("--takeover: a hand-over message without its descriptors");
    }
    for (size_t i = 0; i < message->fds.size(); ++i) {
      handed.push_back(
          {reply.handed_over().names(static_cast<int>(i)), std::move(message->fds[i])});
    }
    if (reply.handed_over().last()) return handed;
  }
}

}  // namespace tensorbroker::daemon
