// Whom a client trusts to serve a broker socket, checked with the kernel's word for it:
// SO_PEERCRED of a connected socket names the uid that created the listening one. Trusted are
// root, the daemon's user, and this process's own uid (a private daemon); anyone else may have
// squatted the path (e.g. created /tmp/tensorbroker-$UID first) to read what clients send.
//
// The daemon's user is $TENSORBROKER_DAEMON_USER (a user name, or a uid for a user this machine
// or image has no name for) when set and not empty, else the system user `tensorbroker` (the
// packaged service's User=) when it exists, else nobody beyond root and self.
//
// An untrusted server is FAILED_PRECONDITION (not PERMISSION_DENIED, which says this process may
// not connect; here the socket is not what it should be, and the fix is the operator's):
//   socket /tmp/tensorbroker-1000/broker.sock is served by uid 65534 (nobody), not by root,
//   tensorbroker or uid 1000 (you): refusing to trust it (...)
//
//   if (absl::Status s = VerifyServerAt(path); !s.ok()) return s;  // before gRPC connects
//   ... connect(fd, path) ...; if (s = CheckServerIdentity(fd, path); !s.ok()) return s;
//
// Stateless; thread-safe (the environment, the password database, getsockopt).
#ifndef TENSORBROKER_COMMON_SERVER_IDENTITY_H_
#define TENSORBROKER_COMMON_SERVER_IDENTITY_H_

#include <sys/types.h>

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tensorbroker {

inline constexpr char kDaemonUserVariable[] = "TENSORBROKER_DAEMON_USER";
inline constexpr char kDefaultDaemonUser[] = "tensorbroker";

struct TrustedServers {
  uid_t self = 0;                    // this process's effective uid
  std::optional<uid_t> daemon_user;  // the configured daemon user, if any

  bool Trusts(uid_t uid) const;
  // "root, tensorbroker or uid 1000 (you)": each trusted uid once, by name where it has one.
  std::string Describe() const;
};

// `daemon_user_setting`: the value of $TENSORBROKER_DAEMON_USER ("" when unset).
// INVALID_ARGUMENT when it is neither a user name known here nor a uid.
absl::StatusOr<TrustedServers> TrustedServersFor(uid_t self,
                                                 const std::string& daemon_user_setting);
// The same for this process: geteuid() and its environment.
absl::StatusOr<TrustedServers> TrustedServersOfThisProcess();

// Checks the server at the other end of `connected_fd` (a connected AF_UNIX socket to
// `socket_path`, named in the message). OK or FAILED_PRECONDITION (INTERNAL if the kernel
// cannot say; INVALID_ARGUMENT for a bad $TENSORBROKER_DAEMON_USER).
absl::Status CheckServerIdentity(int connected_fd, const std::string& socket_path);

// For a path a transport will connect to by itself (gRPC's "unix:" target): the per-user
// directory rule (socket_directory.h), then one plain SOCK_STREAM connect, CheckServerIdentity
// and close. OK; UNAVAILABLE when nobody listens there (yet); PERMISSION_DENIED when this process
// may not connect; INVALID_ARGUMENT for a path too long for a socket; FAILED_PRECONDITION for an
// untrusted directory or server.
absl::Status VerifyServerAt(const std::string& socket_path);

}  // namespace tensorbroker

#endif  // TENSORBROKER_COMMON_SERVER_IDENTITY_H_
