#include "daemon/peer_registry.h"

#include "absl/strings/strip.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tensorbroker::daemon {

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
