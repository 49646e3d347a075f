// Listening TCP sockets of our own (the metrics endpoint, the peer port) and the numeric text
// of socket addresses for logs. No SO_REUSEPORT: a port is one daemon's. Thread-safe.
#ifndef TENSORBROKER_DAEMON_TCP_LISTENER_H_
#define TENSORBROKER_DAEMON_TCP_LISTENER_H_

#include <sys/socket.h>

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/unique_fd.h"
#include "daemon/net/listen_address.h"

namespace tensorbroker::daemon {

// A listening TCP socket (non-blocking, close-on-exec) on `where`'s host (numeric; empty: every
// interface, IPv6 and IPv4 where the kernel has IPv6) and port, with room for `backlog`
// connections in the kernel's queue. UNAVAILABLE "FIELD: cannot listen on TEXT: WHY" (`text` as
// the user wrote it) when the port is taken or the address is not this host's.
absl::StatusOr<UniqueFd> ListenTcp(const ListenAddress& where, absl::string_view field,
                                   absl::string_view text, int backlog);

// "1.2.3.4:80", "[::1]:80"; "?" when the address cannot be written.
std::string FormatSocketAddress(const sockaddr_storage& address, socklen_t size);
// The host alone: "1.2.3.4", "::1"; "?" likewise.
std::string FormatSocketHost(const sockaddr_storage& address, socklen_t size);
// The address `fd` is bound to, as FormatSocketAddress writes it.
std::string LocalAddressOf(int fd);

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_TCP_LISTENER_H_
