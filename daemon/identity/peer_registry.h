// Who is at the other end of each client connection: the kernel's SO_PEERCRED (pid, uid, gid)
// taken when UnixSocketAcceptor accepts it, looked up per call from gRPC's peer string
// ("fd:N", the name gRPC gives a connection handed over as a file descriptor). The pid is in
// the daemon's pid namespace. Thread-safe (one mutex).
//
// An entry is replaced when the kernel reuses the descriptor number for a new connection, which
// is registered before gRPC sees it; a stale entry is never read, because no call names a
// closed connection.
#ifndef TENSORBROKER_DAEMON_PEER_REGISTRY_H_
#define TENSORBROKER_DAEMON_PEER_REGISTRY_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/mutex.h"

namespace tensorbroker::daemon {

struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  // The peer process's supplementary groups (SO_PEERGROUPS), then the other groups the
  // system's group database gives its uid (getgrouplist).
  std::vector<gid_t> groups;
};

// The kernel's credentials of the peer of connected Unix socket `fd` (SO_PEERCRED, and the
// process's supplementary groups from SO_PEERGROUPS) and its uid's group list; nullopt, with a
// warning naming `what` logged, when the kernel cannot say (the connection is refused).
std::optional<PeerCredentials> PeerCredentialsOf(int fd, absl::string_view what);

class PeerRegistry {
 public:
  void Register(int fd, const PeerCredentials& peer);
  // Connections still open: entries whose descriptor still refers to the socket registered
  // (gRPC closes connections without telling); the others are forgotten. O(entries).
  size_t CountOpen();
  // Entries, open or not (an upper bound of the connections open).
  size_t Size() const;
  // The credentials of the connection gRPC calls `peer`; nullopt for other peers.
  std::optional<PeerCredentials> Lookup(absl::string_view peer) const;
  // "pid=123 uid=1000" for log lines; "pid=? uid=?" when unknown.
  std::string Describe(absl::string_view peer) const;

 private:
  mutable Mutex mu_;
  struct Entry {
    PeerCredentials peer;
    ino_t inode = 0;  // of the socket: a reused descriptor number refers to another one
  };
  std::unordered_map<int, Entry> by_fd_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_PEER_REGISTRY_H_
