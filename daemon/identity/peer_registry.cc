#include "daemon/identity/peer_registry.h"

#include <grp.h>
#include <pwd.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/mutex.h"
#include "daemon/base/log.h"
#include "daemon/base/open_sockets.h"

namespace tensorbroker::daemon {

namespace {

// A principal is a uid: its groups include every group the system's group database gives it
// (getgrouplist), not only those its process holds now. Nothing when the uid has no name.
void AppendGroupsOfUser(uid_t uid, gid_t gid, std::vector<gid_t>* groups) {
  passwd entry{};
  passwd* found = nullptr;
  std::vector<char> buffer(16384);
  if (::getpwuid_r(uid, &entry, buffer.data(), buffer.size(), &found) != 0 || found == nullptr) {
    return;
  }
  std::vector<gid_t> listed(64);
  int count = static_cast<int>(listed.size());
  if (::getgrouplist(found->pw_name, gid, listed.data(), &count) < 0) {
    listed.resize(static_cast<size_t>(count));  // it said how many there are
    if (::getgrouplist(found->pw_name, gid, listed.data(), &count) < 0) return;
  }
  listed.resize(static_cast<size_t>(count));
  for (gid_t listed_gid : listed) {
    if (std::find(groups->begin(), groups->end(), listed_gid) == groups->end()) {
      groups->push_back(listed_gid);
    }
  }
}

}  // namespace

std::optional<PeerCredentials> PeerCredentialsOf(int fd, absl::string_view what) {
  ucred credentials{};
  socklen_t size = sizeof(credentials);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &size) != 0) {
    Log(LogLevel::kWarning, what, ": SO_PEERCRED: ", std::strerror(errno), "; connection refused");
    return std::nullopt;
  }
  PeerCredentials peer{credentials.pid, credentials.uid, credentials.gid, {}};
  // SO_PEERGROUPS says how much room it needs when the buffer is too small (ERANGE).
  peer.groups.resize(64);
  for (int attempt = 0; attempt < 2; ++attempt) {
    socklen_t bytes = static_cast<socklen_t>(peer.groups.size() * sizeof(gid_t));
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, peer.groups.data(), &bytes) == 0) {
      peer.groups.resize(bytes / sizeof(gid_t));
      AppendGroupsOfUser(peer.uid, peer.gid, &peer.groups);
      return peer;
    }
    if (errno != ERANGE) break;
    peer.groups.resize(bytes / sizeof(gid_t));
  }
  Log(LogLevel::kWarning, what, ": SO_PEERGROUPS: ", std::strerror(errno), "; connection refused");
  return std::nullopt;
}

void PeerRegistry::Register(int fd, const PeerCredentials& peer) {
  const ino_t inode = SocketInodeOf(fd);
  MutexLock lock(mu_);
  by_fd_[fd] = Entry{peer, inode};
}

size_t PeerRegistry::CountOpen() {
  MutexLock lock(mu_);
  for (auto it = by_fd_.begin(); it != by_fd_.end();) {
    if (it->second.inode == 0 || SocketInodeOf(it->first) != it->second.inode) {
      it = by_fd_.erase(it);
    } else {
      ++it;
    }
  }
  return by_fd_.size();
}

size_t PeerRegistry::Size() const {
  MutexLock lock(mu_);
  return by_fd_.size();
}

std::optional<PeerCredentials> PeerRegistry::Lookup(absl::string_view peer) const {
  int fd = -1;
  if (!absl::ConsumePrefix(&peer, "fd:") || !absl::SimpleAtoi(peer, &fd)) return std::nullopt;
  MutexLock lock(mu_);
  auto it = by_fd_.find(fd);
  if (it == by_fd_.end()) return std::nullopt;
  return it->second.peer;
}

std::string PeerRegistry::Describe(absl::string_view peer) const {
  const std::optional<PeerCredentials> found = Lookup(peer);
  if (!found.has_value()) return "pid=? uid=?";
  return absl::StrCat("pid=", found->pid, " uid=", found->uid);
}

}  // namespace tensorbroker::daemon
