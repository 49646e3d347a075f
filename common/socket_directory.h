// Which directories a broker socket may live in: the rules the daemon applies before it serves
// there, and the one a client applies before it trusts a socket there. Whoever may write the
// socket's directory may replace the socket (or, in a sticky directory like /tmp, take its name
// first), so only the daemon's own user and root may.
//
// Every rule is FAILED_PRECONDITION with a message naming the directory, its owner and its mode;
// the message has no flag prefix (callers add "--socket: " or the socket's path).
// Stateless; thread-safe (stat(2) and the password database only).
#ifndef TENSORBROKER_COMMON_SOCKET_DIRECTORY_H_
#define TENSORBROKER_COMMON_SOCKET_DIRECTORY_H_

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "common/server_identity.h"

namespace tensorbroker {

// The directory `socket_path` is in, absolute and normalized ("b.sock": the working directory).
std::string SocketDirectoryOf(const std::string& socket_path);

// The per-user fallback directory /tmp/tensorbroker-<N> (socket_path.h) counts only when it is
// uid N's own and mode 0700: anyone may create it first. OK for any other directory, and when
// `directory` does not exist (there is no socket there to trust).
absl::Status CheckPerUserSocketDirectory(const std::string& directory);

// What a daemon requires of its socket's (existing) directory: owned by a user its clients trust
// to serve (`servers`, server_identity.h: root, the daemon's own uid, the daemon user), since the
// owner could replace the socket; writable by neither its group nor others (sticky or not); and
// the per-user rule above. A group-readable directory (the packaged /run/tensorbroker, 0750) is
// fine, and so is a root-run daemon in that directory of the service's user `tensorbroker`.
absl::Status CheckDaemonSocketDirectory(const std::string& directory,
                                        const TrustedServers& servers);

}  // namespace tensorbroker

#endif  // TENSORBROKER_COMMON_SOCKET_DIRECTORY_H_
