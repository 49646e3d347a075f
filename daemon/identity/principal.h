// Who makes a call: a principal is a uid, with the groups its process holds, or another broker
// (a peer). The daemon learns a local caller from the kernel (SO_PEERCRED and SO_PEERGROUPS of
// the caller's connection, see PeerCredentialsOf) and a peer from the certificate its TLS
// connection was verified with (--peer-listen), never from anything the caller says.
// Values only; thread-safe to copy.
#ifndef TENSORBROKER_DAEMON_PRINCIPAL_H_
#define TENSORBROKER_DAEMON_PRINCIPAL_H_

#include <cstdint>
#include <string>
#include <vector>

namespace tensorbroker::daemon {

// The uid of a peer: (uint32_t)-1 is no one's (chown and setresuid read it as "unchanged"), so
// no uid:N entry, owner or quota ever matches it.
inline constexpr uint32_t kPeerUid = UINT32_MAX;

struct Principal {
  uint32_t uid = 0;  // kPeerUid for a peer
  // The primary gid first, then the supplementary ones (no order promised, may repeat).
  std::vector<uint32_t> gids;
  // root, or a member of the configured admin-group (set by AccessPolicy::PrincipalOf): may
  // read, replace and delete every tensor and sees every user's usage.
  bool admin = false;
  // A peer's names: its certificate's common name, then its DNS subject alternative names
  // (peer:NAME matches any of them; the first names it in logs and metrics). Empty for a local
  // caller. A peer has no groups and is never an administrator.
  std::vector<std::string> peer_names;

  bool InGroup(uint32_t gid) const;
  bool is_peer() const { return !peer_names.empty(); }
};

// A principal for the peer with the certificate names `names` (not empty).
Principal PeerPrincipal(std::vector<std::string> names);

// The name of `uid` on this host (getpwuid_r); empty when it has none.
std::string UserNameOf(uint32_t uid);
// "uid 1000 (alice)" for messages and log lines; "uid 1000" when the name is unknown.
std::string DescribeUid(uint32_t uid);
// DescribeUid of a local principal; "peer broker-b" for a peer.
std::string DescribePrincipal(const Principal& principal);

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_PRINCIPAL_H_
