// The broker's certificates for mutual TLS with other brokers (--tls-cert, --tls-key, --tls-ca),
// read and checked once at start, and the names a verified peer's certificate gives it.
//
// A peer's identity is its certificate: its common name, then its DNS subject alternative
// names. gRPC verifies the chain against --tls-ca during the handshake (a connection without a
// valid certificate from that CA never makes a call); PeerNamesOf only reads what it verified.
// Values and pure functions; thread-safe.
#ifndef TENSORBROKER_DAEMON_PEER_TLS_H_
#define TENSORBROKER_DAEMON_PEER_TLS_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tensorbroker::daemon {

// Where the PEM files are; all three or none.
struct PeerTlsPaths {
  std::string cert;  // --tls-cert: this broker's certificate chain, its own first
  std::string key;   // --tls-key: its private key
  std::string ca;    // --tls-ca: the certificates that sign every peer's (and this one)
  bool empty() const { return cert.empty() && key.empty() && ca.empty(); }
};

// What a broker presents to its peers and trusts from them.
struct PeerTls {
  std::string cert_chain;   // PEM
  std::string private_key;  // PEM
  std::string ca_certs;     // PEM
  // This broker's own names (its certificate's common name, then its DNS names).
  std::vector<std::string> names;
  std::string not_after;  // its certificate's end of validity, e.g. "Dec  6 00:00:00 2027 GMT"
};

// Reads and checks the three files: each readable PEM of its kind, the key the certificate's,
// the certificate signed by the CA and valid now. FAILED_PRECONDITION naming the flag, its
// path and what is wrong.
absl::StatusOr<PeerTls> LoadPeerTls(const PeerTlsPaths& paths);

// A server's credentials that require a client certificate the CA signed, and verify it.
std::shared_ptr<grpc::ServerCredentials> PeerServerCredentials(const PeerTls& tls);
// A channel's credentials that present this broker's certificate and trust the CA's.
std::shared_ptr<grpc::ChannelCredentials> PeerChannelCredentials(const PeerTls& tls);

// The names of the verified peer of a call's connection: the common name, then the DNS
// subject alternative names, without repeats. Empty when the connection is not TLS with a
// verified client certificate (a local client's).
std::vector<std::string> PeerNamesOf(const grpc::AuthContext& auth);

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_PEER_TLS_H_
