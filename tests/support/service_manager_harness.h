// Plays the service manager's documented part for tests, since systemd is not PID 1 on the
// machines that run them: a $NOTIFY_SOCKET that reads sd_notify(3) messages, keeps the
// descriptors sent with FDSTORE=1 under their FDNAME (dropping every one named by
// FDSTOREREMOVE=1), notes READY=1, and hands what it keeps to the next process it starts
// through LISTEN_FDS, LISTEN_FDNAMES and LISTEN_PID (sd_listen_fds(3)), after any sockets
// given first, as a socket unit would.
//
// A thread of its own reads every message as it comes, as the service manager does: a
// datagram socket's queue is short (net.unix.max_dgram_qlen, 10 by default), and a sender whose
// message finds it full waits. Fork safety: Start() builds everything before fork() and only
// dup2()s and exec()s after it. Methods are for one owner thread; they lock against the reader.
#ifndef TENSORBROKER_TESTS_SUPPORT_SERVICE_MANAGER_HARNESS_H_
#define TENSORBROKER_TESTS_SUPPORT_SERVICE_MANAGER_HARNESS_H_

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/unique_fd.h"

namespace tensorbroker::testing {

class ServiceManagerHarness {
 public:
  // A notification socket at `directory`/notify (the directory must exist).
  static absl::StatusOr<std::unique_ptr<ServiceManagerHarness>> Create(
      const std::string& directory);
  // The same in a new private directory under /tmp, removed (with all in it) with the harness.
  static absl::StatusOr<std::unique_ptr<ServiceManagerHarness>> CreateInTemporaryDirectory();

  const std::string& notify_socket() const { return path_; }
  // Where the notification socket is: a place for the daemon's socket too.
  std::string directory() const { return path_.substr(0, path_.rfind('/')); }
  ~ServiceManagerHarness();
  // Waits until every message already sent has been read.
  void Drain();
  // Waits until `done()` holds (true) or `timeout` passes (false). `done` runs under the lock
  // and may call the accessors below.
  bool WaitFor(const std::function<bool()>& done, absl::Duration timeout);

  // The names of the kept descriptors, sorted, one entry per descriptor.
  std::vector<std::string> StoredNames() const;
  // The kept descriptors under `name` (borrowed).
  std::vector<int> StoredFds(const std::string& name) const;
  // Keeps `fd` under `name` as if FDSTORE=1 had sent it (to hand a process something else).
  void Keep(const std::string& name, UniqueFd fd);
  // Plays a socket unit: binds `path` (mode 0660) as a listening AF_UNIX socket of `type` and
  // hands it, named "tensorbroker", to every process started from now on, first.
  absl::Status Listen(const std::string& path, int type);
  bool ready() const;
  std::vector<std::string> messages() const;

  // Starts `argv` (argv[0] a path) with $NOTIFY_SOCKET set and, as descriptors 3, 4, ...,
  // the `sockets` (name, borrowed descriptor) then every kept descriptor, named in
  // $LISTEN_FDNAMES (after the Listen() sockets); its stderr is `stderr_fd` (borrowed; -1:
  // this process's, e.g. DaemonLog::child_end()). Resets ready(). Returns the child's pid; the
  // caller waits for it.
  absl::StatusOr<pid_t> Start(const std::vector<std::string>& argv,
                              const std::vector<std::pair<std::string, int>>& sockets = {},
                              int stderr_fd = -1);

 private:
  ServiceManagerHarness(std::string path, UniqueFd socket, UniqueFd wake);
  void ReadLoop();
  bool ReadOneLocked();  // one message, if one is waiting

  const std::string path_;
  const UniqueFd socket_;
  const UniqueFd wake_;  // an eventfd that stops the reader
  // Recursive: WaitFor's `done` may call the accessors, which lock too.
  mutable std::recursive_mutex mu_;
  std::multimap<std::string, UniqueFd> stored_;
  std::vector<UniqueFd> sockets_;  // Listen()
  std::vector<std::string> messages_;
  bool ready_ = false;
  std::thread reader_;
  bool owns_directory_ = false;
};

}  // namespace tensorbroker::testing

#endif  // TENSORBROKER_TESTS_SUPPORT_SERVICE_MANAGER_HARNESS_H_
