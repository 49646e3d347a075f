#include "daemon/net/listen_address.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tensorbroker::daemon {
namespace {

absl::Status BadAddress(absl::string_view field, absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, " '", text.substr(0, 64), "': ", why));
}

}  // namespace

absl::StatusOr<ListenAddress> ParseListenAddress(absl::string_view text, absl::string_view field) {
  if (text.empty()) return BadAddress(field, text, "is empty; give HOST:PORT, e.g. 127.0.0.1:9464");
  ListenAddress address;
  absl::string_view port;
  const bool bracketed = absl::StartsWith(text, "[");
  if (bracketed) {
    const size_t close = text.find(']');
    if (close == absl::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return BadAddress(field, text, "an IPv6 address is written [ADDRESS]:PORT, e.g. [::1]:9464");
    }
    address.host = std::string(text.substr(1, close - 1));
    port = text.substr(close + 2);
    if (address.host.empty()) return BadAddress(field, text, "the IPv6 address is empty");
  } else {
    const size_t colon = text.rfind(':');
    if (colon == absl::string_view::npos) {
      return BadAddress(field, text, "needs HOST:PORT (or :PORT for every interface)");
    }
    address.host = std::string(text.substr(0, colon));
    port = text.substr(colon + 1);
    if (address.host.find(':') != std::string::npos) {
      return BadAddress(field, text, "an IPv6 address goes in brackets, e.g. [::1]:9464");
    }
  }
  // Numeric addresses only: a name may resolve to several addresses, and which one would be
  // bound is not for an operator to guess.
  unsigned char scratch[sizeof(in6_addr)];
  const int family = bracketed ? AF_INET6 : AF_INET;
  if (!address.host.empty() && ::inet_pton(family, address.host.c_str(), scratch) != 1) {
    return BadAddress(
        field, text,
        bracketed ? "the host is not an IPv6 address"
                  : "the host is not an IPv4 address (IPv6 goes in brackets, e.g. [::1]:9464)");
  }
  uint32_t number = 0;
  if (port.empty() || !std::all_of(port.begin(), port.end(), absl::ascii_isdigit) ||
      port.size() > 5 || !absl::SimpleAtoi(port, &number) || number > 65535) {
    return BadAddress(field, text, "the port is not a number from 0 to 65535");
  }
  address.port = static_cast<uint16_t>(number);
  return address;
}

std::string HostPort(const ListenAddress& address, uint16_t port) {
  if (address.host.empty()) return absl::StrCat("[::]:", port);
  if (address.host.find(':') != std::string::npos)
    return absl::StrCat("[", address.host, "]:", port);
  return absl::StrCat(address.host, ":", port);
}

}  // namespace tensorbroker::daemon
