// Runs one tensorbrokerd instance to completion: starts a Daemon (daemon.h: the lock, adoption,
// the store, the sockets), serves until SIGTERM/SIGINT (or a takeover's hand-over), then
// destroys it, which shuts down in order (stop accepting, end sessions, finish in-flight calls,
// free every segment, remove the socket files it bound). SIGHUP calls `reload` and applies what
// can change at run time (the log level), logging what changed. Call from main() before any
// other thread exists: it blocks the signals it waits for.
#ifndef TENSORBROKER_DAEMON_DAEMON_RUNNER_H_
#define TENSORBROKER_DAEMON_DAEMON_RUNNER_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "daemon/app/daemon_options.h"

namespace tensorbroker::daemon {

// The /dev/shm name prefix of every segment served on `socket_path`: "tb-<8 hex>-". Each
// instance adds its own random id: "tb-<socket hash>-<instance>-<n>".
std::string SegmentPrefixFor(const std::string& socket_path);

using OptionsLoader = std::function<absl::StatusOr<DaemonOptions>()>;

absl::Status RunDaemon(const DaemonOptions& options, const OptionsLoader& reload = nullptr);

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_DAEMON_RUNNER_H_
