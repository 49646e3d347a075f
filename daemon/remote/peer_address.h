// Where a remote prefix's brokers are (remote[PREFIX] = ADDRESS): HOST:PORT, where HOST is a
// DNS name (which may resolve to several brokers: a Kubernetes headless Service), an IPv4
// address, or an IPv6 one in brackets. Resolved anew for each fetch, so brokers that come and
// go behind a name are followed. Values and blocking lookups (getaddrinfo); thread-safe.
#ifndef TENSORBROKER_DAEMON_PEER_ADDRESS_H_
#define TENSORBROKER_DAEMON_PEER_ADDRESS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tensorbroker::daemon {

struct PeerAddress {
  std::string host;  // a DNS name, or an IP address (without brackets)
  uint16_t port = 0;
  bool numeric = false;  // host is an IP address: no lookup, and no name to check against

  // "node-a.example:7070", "10.0.0.2:7070" or "[fd00::2]:7070".
  std::string ToString() const;
};

// INVALID_ARGUMENT naming `field` and saying what is wrong.
absl::StatusOr<PeerAddress> ParsePeerAddress(absl::string_view text, absl::string_view field);

// One broker to call: a gRPC target ("ipv4:10.0.0.2:7070") and the name its certificate must
// have (the DNS name it was found under; empty for a numeric address: then its IP).
struct PeerEndpoint {
  std::string target;
  std::string tls_name;
  std::string label;  // how messages name it: "tensorbroker-peers.ns.svc:7070 (10.0.0.2)"
};

// The gRPC targets of every address `address` stands for now ("ipv4:10.0.0.2:7070",
// "ipv6:[fd00::2]:7070"), in the resolver's order, without repeats; UNAVAILABLE naming the host
// when it resolves to none.
absl::StatusOr<std::vector<std::string>> ResolvePeerTargets(const PeerAddress& address);

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_PEER_ADDRESS_H_
