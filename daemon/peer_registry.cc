#include "daemon/peer_registry.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "daemon/log.h"

namespace tensorbroker::daemon {

std::optional<PeerCredentials> PeerCredentialsOf(int fd, absl::string_view what) {
  ucred credentials{};
  socklen_t size = sizeof(credentials);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &size) != 0) {
    Log(LogLevel::kWarning, what, ": SO_PEERCRED: ", std::strerror(errno),
        "; connection refused");
    return std::nullopt;
  }
  PeerCredentials peer{credentials.pid, credentials.uid, credentials.gid, {}};
  // SO_PEERGROUPS says how much room it needs when the buffer is too small (ERANGE).
  peer.groups.resize(64);
  for (int attempt = 0; attempt < 2; ++attempt) {
    socklen_t bytes = static_cast<socklen_t>(peer.groups.size() * sizeof(gid_t));
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, peer.groups.data(), &bytes) == 0) {
      peer.groups.resize(bytes / sizeof(gid_t));
      return peer;
    }
    if (errno != ERANGE) break;
    peer.groups.resize(bytes / sizeof(gid_t));
  }
  Log(LogLevel::kWarning, what, ": SO_PEERGROUPS: ", std::strerror(errno),
      "; connection refused");
  return std::nullopt;
}

void PeerRegistry::Register(int fd, const PeerCredentials& peer) {
  std::lock_guard<std::mutex> lock(mu_);
  by_fd_[fd] = peer;
}

std::optional<PeerCredentials> PeerRegistry::Lookup(absl::string_view peer) const {
  int fd = -1;
  if (!absl::ConsumePrefix(&peer, "fd:") || !absl::SimpleAtoi(peer, &fd)) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_fd_.find(fd);
  if (it == by_fd_.end()) return std::nullopt;
  return it->second;
}

std::string PeerRegistry::Describe(absl::string_view peer) const {
  const std::optional<PeerCredentials> found = Lookup(peer);
  if (!found.has_value()) return "pid=? uid=?";
  return absl::StrCat("pid=", found->pid, " uid=", found->uid);
}

}  // namespace tensorbroker::daemon
