// How many client connections each of the daemon's sockets holds at most, and how long a
// connection may stay silent (no call on the gRPC socket, no session on the local channel)
// before it is closed: --max-connections and --handshake-timeout. Connections of the daemon's
// own uid (its health check and watchdog ping) have `kReservedConnections` more, so that no
// flood by another user makes the daemon fail its own health check; and another user's
// connection is admitted only while the daemon has descriptors to spare
// (descriptor_reserve.h).
// A TCP listener (the peer port) counts per remote host instead of per uid (AdmitFromHost).
// Thread-safe: Admit may be called from any thread.
#ifndef TENSORBROKER_DAEMON_CONNECTION_LIMITS_H_
#define TENSORBROKER_DAEMON_CONNECTION_LIMITS_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/base/refusal_log.h"

namespace tensorbroker::daemon {

inline constexpr size_t kReservedConnections = 16;
// A TCP listener's connections from one remote host (address): a broker needs a few, and a host
// without a certificate cannot take every slot of the port.
inline constexpr size_t kMaxConnectionsPerHost = 64;

struct ConnectionSettings {
  size_t max_connections = 4096;
  absl::Duration handshake_timeout = absl::Seconds(10);
};

class ConnectionLimit {
 public:
  // `what` names the socket in log lines; `own_uid` is the daemon's.
  ConnectionLimit(std::string what, size_t max_connections, uid_t own_uid);

  // Whether a new connection of `uid` may join the `open` ones. A refusal is logged (at most
  // one line per 10 s, with the count refused meanwhile).
  bool Admit(uid_t uid, size_t open);
  // Whether a new TCP connection from `host` may join the `open` ones, `from_host` of them from
  // that host: at most max_connections() in all, kMaxConnectionsPerHost from one host, and only
  // while the daemon has descriptors to spare. Refusals are logged as Admit logs them.
  bool AdmitFromHost(absl::string_view host, size_t open, size_t from_host);
  size_t max_connections() const { return max_; }

 private:
  // Logs a refusal (at most one line per 10 s): `why`, then the count refused meanwhile and
  // `last`, who was refused last ("of uid 1000", "from 10.0.0.3").
  void NoteRefusal(absl::string_view why, absl::string_view last);

  const size_t max_;
  const uid_t own_uid_;
  RefusalLog refusals_;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_CONNECTION_LIMITS_H_
