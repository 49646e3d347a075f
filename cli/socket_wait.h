// Before a command connects: is there anything at the socket path to wait for? So that a path
// where nothing is (no daemon ever started there, a typo in --socket) is said at once, instead of
// after the whole connect timeout, while a daemon on its way up is still waited for.
//
// The rule, for a path that does not exist (a path that exists is left to the connect, which
// waits up to its timeout for whatever listens there to answer):
//   - it is looked for again every 20 ms while a daemon holds "<path>.lock" (the daemon takes
//     that lock before it binds the socket: it is starting), up to the timeout;
//   - and for kSocketAppearGrace in any case, for a daemon started a moment before the command
//     that has not taken its lock yet;
//   - once neither holds it is UNAVAILABLE: "<path> does not exist: ...".
// Thread-compatible.
#ifndef TENSORBROKER_CLI_SOCKET_WAIT_H_
#define TENSORBROKER_CLI_SOCKET_WAIT_H_

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace tensorbroker::cli {

inline constexpr absl::Duration kSocketAppearGrace = absl::Milliseconds(500);

// OK once `socket_path` exists (or cannot be looked at: EACCES and the like are left to the
// connect to report), within `timeout` as above; UNAVAILABLE naming the path otherwise. A zero
// `timeout` only looks: UNAVAILABLE at once for a path that does not exist.
absl::Status AwaitSocketPath(const std::string& socket_path, absl::Duration timeout,
                             absl::Duration grace = kSocketAppearGrace);

// Whether /proc/locks (its text: `proc_locks`) shows a flock held on the file `device`:`inode`
// (a waiter's "->" line does not count). Without side effects: the lock is not tried, since
// even a shared lock held for a moment would make a starting daemon refuse to start.
bool FlockHeldIn(absl::string_view proc_locks, dev_t device, ino_t inode);

}  // namespace tensorbroker::cli

#endif  // TENSORBROKER_CLI_SOCKET_WAIT_H_
