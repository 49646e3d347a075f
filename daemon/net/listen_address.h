// The address --metrics-listen and --peer-listen take: "IPV4:PORT", "[IPV6]:PORT" or ":PORT" (every
// interface); numeric addresses only. Parsing only; thread-safe.
#ifndef TENSORBROKER_DAEMON_LISTEN_ADDRESS_H_
#define TENSORBROKER_DAEMON_LISTEN_ADDRESS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tensorbroker::daemon {

struct ListenAddress {
  std::string host;   // empty: every interface
  uint16_t port = 0;  // 0: any free port
};
// INVALID_ARGUMENT naming `field` when `text` is not such an address.
absl::StatusOr<ListenAddress> ParseListenAddress(absl::string_view text,
                                                 absl::string_view field = "--metrics-listen");
// "127.0.0.1:PORT", "[::1]:PORT", or "[::]:PORT" (every interface, IPv4 too) for `address`'s
// host and `port`: what gRPC's AddListeningPort takes and what logs show.
std::string HostPort(const ListenAddress& address, uint16_t port);

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_LISTEN_ADDRESS_H_
