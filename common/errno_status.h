// One mapping from errno to the status codes the broker speaks, for every system call the
// daemon and the client make. The message is "<what>: <strerror>".
#ifndef TENSORBROKER_COMMON_ERRNO_STATUS_H_
#define TENSORBROKER_COMMON_ERRNO_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tensorbroker {

// EACCES/EPERM: PERMISSION_DENIED; ENOENT: NOT_FOUND; ENOMEM, ENOSPC, EFBIG, EMFILE, ENFILE:
// RESOURCE_EXHAUSTED; EAGAIN: UNAVAILABLE; anything else INTERNAL.
absl::Status ErrnoStatus(int error, absl::string_view what);

}  // namespace tensorbroker

#endif  // TENSORBROKER_COMMON_ERRNO_STATUS_H_
