// Which of the connections the daemon handed to gRPC are still open. gRPC closes a connection
// without telling, so a connection is recorded by its descriptor number and the socket's inode:
// when the number no longer refers to that socket (closed, or reused for another one), the
// connection is gone. Used to bound the connections a listener holds, in all and per key (the
// remote host of a TCP connection). Thread-safe (one mutex).
#ifndef TENSORBROKER_DAEMON_OPEN_SOCKETS_H_
#define TENSORBROKER_DAEMON_OPEN_SOCKETS_H_

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "common/mutex.h"

namespace tensorbroker::daemon {

// The inode of the socket `fd` refers to; 0 when `fd` is not an open socket.
ino_t SocketInodeOf(int fd);

class OpenSockets {
 public:
  struct Counts {
    size_t total = 0;     // connections recorded
    size_t with_key = 0;  // of them, with the key asked about
  };
  // Records connection `fd` (an open socket, before gRPC owns it) under `key`.
  void Add(int fd, std::string key);
  // Upper bounds: counts of what is recorded, closed connections included; O(1) for the total.
  Counts Recorded(absl::string_view key) const;
  // Forgets the closed connections first, then counts. O(connections recorded).
  Counts CountOpen(absl::string_view key);

 private:
  struct Entry {
    ino_t inode = 0;
    std::string key;
  };
  Counts CountLocked(absl::string_view key) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable Mutex mu_;
  std::unordered_map<int, Entry> by_fd_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<std::string, size_t> per_key_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_OPEN_SOCKETS_H_
