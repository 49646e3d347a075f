// Makes the directory of the daemon's socket ready to serve in, before the instance lock is
// taken there: creates what is missing (each directory it creates is mode 0700, this daemon's
// own), then applies the rules of common/socket_directory.h for this daemon (owned by a user
// clients trust to serve: root, its own uid or the daemon user, $TENSORBROKER_DAEMON_USER or
// `tensorbroker`), and checks that this uid may create files there. A directory that others may
// write, the per-user /tmp/tensorbroker-$UID of someone else or with another mode than 0700, a
// directory of an untrusted owner and one this uid may not write are refused:
// FAILED_PRECONDITION, a message starting "--socket PATH: " and naming the directory, its mode
// or owner.
// Call once at start-up; not thread-safe against other changes to the same directories.
#ifndef TENSORBROKER_DAEMON_SOCKET_DIRECTORY_SETUP_H_
#define TENSORBROKER_DAEMON_SOCKET_DIRECTORY_SETUP_H_

#include <string>

#include "absl/status/status.h"

namespace tensorbroker::daemon {

absl::Status PrepareSocketDirectory(const std::string& socket_path);

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_SOCKET_DIRECTORY_SETUP_H_
