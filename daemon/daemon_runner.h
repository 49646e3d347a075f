// Runs one tensorbrokerd instance to completion: takes the socket's lock, cleans what a dead
// predecessor left in /dev/shm, serves gRPC until SIGTERM/SIGINT, then shuts down in order
// (stop accepting, end sessions, finish in-flight calls, free every segment, remove the
// socket). Call from main() before any other thread exists: it blocks the stop signals.
#ifndef TENSORBROKER_DAEMON_DAEMON_RUNNER_H_
#define TENSORBROKER_DAEMON_DAEMON_RUNNER_H_

#include <string>

#include "absl/status/status.h"
#include "daemon/daemon_options.h"

namespace tensorbroker::daemon {

// The /dev/shm name prefix of every segment served on `socket_path`: "tb-<8 hex>-". Each
// instance adds its own random id: "tb-<socket hash>-<instance>-<n>".
std::string SegmentPrefixFor(const std::string& socket_path);

absl::Status RunDaemon(const DaemonOptions& options);

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_DAEMON_RUNNER_H_
