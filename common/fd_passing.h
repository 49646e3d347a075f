// One message per datagram on a SOCK_SEQPACKET Unix socket, with descriptors alongside
// (SCM_RIGHTS): how the daemon's local channel and its clients talk. Received descriptors are
// close-on-exec (MSG_CMSG_CLOEXEC) and owned by the caller; descriptors that did not fit the
// caller's limit are closed by the kernel and reported as an error, never leaked.
// Stateless; thread-safe as far as the socket is.
#ifndef TENSORBROKER_COMMON_FD_PASSING_H_
#define TENSORBROKER_COMMON_FD_PASSING_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/unique_fd.h"

namespace tensorbroker {

// Most descriptors one message carries.
inline constexpr size_t kMaxFdsPerMessage = 16;

// Sends `bytes` as one datagram with `fds` (borrowed; the receiver gets its own copies).
// UNAVAILABLE with EAGAIN on a non-blocking socket whose buffer is full (nothing was sent);
// other errors as ErrnoStatus.
absl::Status SendMessage(int socket, absl::string_view bytes, const std::vector<int>& fds = {});

struct ReceivedMessage {
  bool closed = false;  // the peer closed the connection (no message)
  std::string bytes;
  std::vector<UniqueFd> fds;
};
// Receives one datagram of at most `max_bytes`. UNAVAILABLE (EAGAIN) when a non-blocking socket
// has nothing; INVALID_ARGUMENT when the datagram was longer than `max_bytes` or carried more
// than `max_fds` descriptors (whatever it carried is closed).
absl::StatusOr<ReceivedMessage> ReceiveMessage(int socket, size_t max_bytes,
                                               size_t max_fds = kMaxFdsPerMessage);

}  // namespace tensorbroker

#endif  // TENSORBROKER_COMMON_FD_PASSING_H_
