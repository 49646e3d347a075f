#include "common/fd_passing.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/errno_status.h"

namespace tensorbroker {

absl::Status SendMessage(int socket, absl::string_view bytes, const std::vector<int>& fds) {
  if (fds.size() > kMaxFdsPerMessage) {
    return absl::InternalError(absl::StrCat("cannot send ", fds.size(), " descriptors at once"));
  }
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  msghdr message{};
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)];
  if (!fds.empty()) {
    message.msg_control = control;
    message.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(header), fds.data(), sizeof(int) * fds.size());
  }
  while (true) {
    const ssize_t sent = ::sendmsg(socket, &message, MSG_NOSIGNAL);
    if (sent >= 0) return absl::OkStatus();
    if (errno != EINTR) return ErrnoStatus(errno, "sending on the local channel");
  }
}

absl::StatusOr<ReceivedMessage> ReceiveMessage(int socket, size_t max_bytes, size_t max_fds) {
  ReceivedMessage received;
  // One buffer per thread, reused: a fresh max_bytes string per message would be allocated and
  // zero-filled each time, which costs more than the message.
  thread_local std::vector<char> buffer;
  if (buffer.size() < max_bytes) buffer.resize(max_bytes);
  iovec iov{buffer.data(), max_bytes};
  msghdr message{};
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)];
  message.msg_control = control;
  message.msg_controllen = CMSG_SPACE(sizeof(int) * std::min(max_fds, kMaxFdsPerMessage));
  if (max_fds == 0) {
    message.msg_control = nullptr;
    message.msg_controllen = 0;
  }
  ssize_t got;
  do {
    got = ::recvmsg(socket, &message, MSG_CMSG_CLOEXEC);
  } while (got < 0 && errno == EINTR);
  if (got < 0) return ErrnoStatus(errno, "receiving on the local channel");
  for (cmsghdr* header = CMSG_FIRSTHDR(&message); header != nullptr;
       header = CMSG_NXTHDR(&message, header)) {
    if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(header) + i * sizeof(int), sizeof(int));
      received.fds.emplace_back(fd);
    }
  }
  if ((message.msg_flags & MSG_CTRUNC) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a message carried more than ", max_fds, " descriptors"));
  }
  if ((message.msg_flags & MSG_TRUNC) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a message was longer than ", max_bytes, " bytes"));
  }
  if (got == 0 && received.fds.empty()) {
    // SOCK_SEQPACKET: a zero-length read is the peer's close (empty datagrams are never sent).
    received.closed = true;
  }
  received.bytes.assign(buffer.data(), static_cast<size_t>(got));
  return received;
}

}  // namespace tensorbroker
