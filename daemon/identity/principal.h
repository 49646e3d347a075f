// Who makes a call: a principal is a uid, with the groups its process holds. The daemon learns
// it from the kernel (SO_PEERCRED and SO_PEERGROUPS of the caller's connection, see
// PeerCredentialsOf), never from anything the client says. Values only; thread-safe to copy.
#ifndef TENSORBROKER_DAEMON_PRINCIPAL_H_
#define TENSORBROKER_DAEMON_PRINCIPAL_H_

#include <cstdint>
#include <string>
#include <vector>

namespace tensorbroker::daemon {

struct Principal {
  uint32_t uid = 0;
  // The primary gid first, then the supplementary ones (no order promised, may repeat).
  std::vector<uint32_t> gids;
  // root, or a member of the configured admin-group (set by AccessPolicy::PrincipalOf): may
  // read, replace and delete every tensor and sees every user's usage.
  bool admin = false;

  bool InGroup(uint32_t gid) const;
};

// The name of `uid` on this host (getpwuid_r); empty when it has none.
std::string UserNameOf(uint32_t uid);
// "uid 1000 (alice)" for messages and log lines; "uid 1000" when the name is unknown.
std::string DescribeUid(uint32_t uid);

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_PRINCIPAL_H_
