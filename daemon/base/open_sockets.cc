#include "daemon/base/open_sockets.h"

#include <sys/stat.h>

#include <utility>

#include "common/mutex.h"

namespace tensorbroker::daemon {

ino_t SocketInodeOf(int fd) {
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISSOCK(info.st_mode)) return 0;
  return info.st_ino;
}

void OpenSockets::Add(int fd, std::string key) {
  const ino_t inode = SocketInodeOf(fd);
  MutexLock lock(mu_);
  // A number recorded before refers to a connection closed since: its count goes.
  if (auto it = by_fd_.find(fd); it != by_fd_.end()) {
    if (--per_key_[it->second.key] == 0) per_key_.erase(it->second.key);
    by_fd_.erase(it);
  }
  ++per_key_[key];
  by_fd_[fd] = Entry{inode, std::move(key)};
}

OpenSockets::Counts OpenSockets::Recorded(absl::string_view key) const {
  MutexLock lock(mu_);
  return CountLocked(key);
}

OpenSockets::Counts OpenSockets::CountOpen(absl::string_view key) {
  MutexLock lock(mu_);
  for (auto it = by_fd_.begin(); it != by_fd_.end();) {
    if (it->second.inode == 0 || SocketInodeOf(it->first) != it->second.inode) {
      if (--per_key_[it->second.key] == 0) per_key_.erase(it->second.key);
      it = by_fd_.erase(it);
    } else {
      ++it;
    }
  }
  return CountLocked(key);
}

OpenSockets::Counts OpenSockets::CountLocked(absl::string_view key) const {
  auto it = per_key_.find(std::string(key));
  return Counts{by_fd_.size(), it == per_key_.end() ? 0 : it->second};
}

}  // namespace tensorbroker::daemon
