#include "daemon/remote/peer_address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tensorbroker::daemon {
namespace {

absl::Status Bad(absl::string_view field, absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, " '", text.substr(0, 300), "': ", why));
}

// A DNS name: labels of letters, digits and '-' (not first or last), dot-separated, at most 253.
bool IsDnsName(absl::string_view host) {
  if (host.empty() || host.size() > 253) return false;
  if (absl::EndsWith(host, ".")) host.remove_suffix(1);
  size_t start = 0;
  while (start <= host.size()) {
    size_t dot = host.find('.', start);
    if (dot == absl::string_view::npos) dot = host.size();
    const absl::string_view label = host.substr(start, dot - start);
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') {
      return false;
    }
    for (char c : label) {
      if (!absl::ascii_isalnum(c) && c != '-') return false;
    }
    start = dot + 1;
  }
  return true;
}

struct AddrInfoFree {
  void operator()(addrinfo* info) const { ::freeaddrinfo(info); }
};

}  // namespace

std::string PeerAddress::ToString() const {
  if (host.find(':') != std::string::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<PeerAddress> ParsePeerAddress(absl::string_view text, absl::string_view field) {
  PeerAddress address;
  absl::string_view port;
  if (absl::StartsWith(text, "[")) {
    const size_t close = text.find(']');
    if (close == absl::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return Bad(field, text, "an IPv6 address is written [ADDRESS]:PORT, e.g. [fd00::2]:7070");
    }
    address.host = std::string(text.substr(1, close - 1));
    port = text.substr(close + 2);
    in6_addr scratch{};
    if (::inet_pton(AF_INET6, address.host.c_str(), &scratch) != 1) {
      return Bad(field, text, "the host in brackets is not an IPv6 address");
    }
    address.numeric = true;
  } else {
    const size_t colon = text.rfind(':');
    if (colon == absl::string_view::npos || colon == 0) {
      return Bad(field, text, "needs HOST:PORT, e.g. tensorbroker-peers.tensorbroker.svc:7070");
    }
    address.host = std::string(text.substr(0, colon));
    port = text.substr(colon + 1);
    in_addr scratch{};
    address.numeric = ::inet_pton(AF_INET, address.host.c_str(), &scratch) == 1;
    if (!address.numeric && !IsDnsName(address.host)) {
      return Bad(field, text,
                 "the host is neither a DNS name nor an IPv4 address (IPv6 goes in brackets)");
    }
  }
  uint32_t number = 0;
  if (port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), absl::ascii_isdigit) ||
      !absl::SimpleAtoi(port, &number) || number == 0 || number > 65535) {
    return Bad(field, text, "the port is not a number from 1 to 65535");
  }
  address.port = static_cast<uint16_t>(number);
  return address;
}

absl::StatusOr<std::vector<std::string>> ResolvePeerTargets(const PeerAddress& address) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = address.numeric ? AI_NUMERICHOST : 0;
  addrinfo* found = nullptr;
  const std::string port = absl::StrCat(address.port);
  const int rc = ::getaddrinfo(address.host.c_str(), port.c_str(), &hints, &found);
  std::unique_ptr<addrinfo, AddrInfoFree> list(found);
  if (rc != 0) {
    return absl::UnavailableError(absl::StrCat("peer ", address.ToString(), ": cannot resolve ",
                                               address.host, ": ", ::gai_strerror(rc)));
  }
  std::vector<std::string> targets;
  for (const addrinfo* entry = list.get(); entry != nullptr; entry = entry->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    std::string target;
    if (entry->ai_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(entry->ai_addr);
      ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
      target = absl::StrCat("ipv4:", text, ":", address.port);
    } else if (entry->ai_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(entry->ai_addr);
      ::inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
      target = absl::StrCat("ipv6:[", text, "]:", address.port);
    } else {
      continue;
    }
    if (std::find(targets.begin(), targets.end(), target) == targets.end()) {
      targets.push_back(std::move(target));
    }
  }
  if (targets.empty()) {
    return absl::UnavailableError(
        absl::StrCat("peer ", address.ToString(), ": ", address.host, " has no address"));
  }
  return targets;
}

}  // namespace tensorbroker::daemon
