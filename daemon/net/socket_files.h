// The one owner of the daemon's socket files (the gRPC socket and the local channel's). Each file
// is added as its listener is bound or taken; the destructor removes those this daemon bound (or
// took over with --takeover: ClaimAll), and only while each is still the file it bound: one bound
// at the same path since (systemd starting tensorbrokerd.socket) is someone else's. Files the
// socket unit made (socket activation) stay for the next instance, and so does every file once
// it has been handed over to a successor (MarkHandedOver).
//
// Threading: Add and ClaimAll on the starting thread; MarkHandedOver from any thread (the local
// channel's loop, during a takeover); handed_over from any thread.
#ifndef TENSORBROKER_DAEMON_SOCKET_FILES_H_
#define TENSORBROKER_DAEMON_SOCKET_FILES_H_

#include <atomic>
#include <string>
#include <vector>

#include "daemon/net/unix_listener.h"

namespace tensorbroker::daemon {

class SocketFiles {
 public:
  SocketFiles() = default;
  ~SocketFiles();
  SocketFiles(const SocketFiles&) = delete;
  SocketFiles& operator=(const SocketFiles&) = delete;

  // `listener`'s file at `path` (bound here, or inherited from the socket unit) from now on.
  void Add(const std::string& path, const UnixListener& listener);
  // Every file added is this daemon's now, inherited or not (--takeover: the running daemon
  // handed its sockets over).
  void ClaimAll();
  // A successor took the sockets over: every file stays.
  void MarkHandedOver() { handed_over_.store(true); }
  bool handed_over() const { return handed_over_.load(); }

 private:
  struct File {
    std::string path;
    UnixListener identity;  // no descriptor: what the file was when bound or taken
  };
  std::vector<File> files_;
  std::atomic<bool> handed_over_{false};
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_SOCKET_FILES_H_
