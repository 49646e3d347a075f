// Accepts connections on a listening socket on a thread of its own and hands each one to a
// handler, on that thread, until stopped. Shared by the Unix socket acceptor and the local
// channel. Stop() (or the destructor) wakes the thread through an eventfd, joins it and
// closes the listening socket; the handler is never called after Stop() returns.
#ifndef TENSORBROKER_DAEMON_ACCEPT_THREAD_H_
#define TENSORBROKER_DAEMON_ACCEPT_THREAD_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "common/unique_fd.h"

namespace tensorbroker::daemon {

class AcceptThread {
 public:
  using Handler = std::function<void(UniqueFd connection)>;

  // Starts accepting on `listener` (bound, listening, non-blocking). `accept_flags` go to
  // accept4 with SOCK_CLOEXEC; `what` names the socket in log lines ("metrics"). INTERNAL when
  // no thread can be started.
  static absl::StatusOr<std::unique_ptr<AcceptThread>> Start(UniqueFd listener, int accept_flags,
                                                             std::string what, Handler handle);
  ~AcceptThread();
  AcceptThread(const AcceptThread&) = delete;
  AcceptThread& operator=(const AcceptThread&) = delete;

  int listener() const { return listener_.get(); }
  // Idempotent; may be called from any thread.
  void Stop();

 private:
  AcceptThread(UniqueFd listener, UniqueFd wake, int accept_flags, std::string what,
               Handler handle);
  void Loop();

  UniqueFd listener_;
  const UniqueFd wake_;
  const int accept_flags_;
  const std::string what_;
  const Handler handle_;
  Mutex stop_mu_;  // Stop from two threads: the second waits for the first
  std::thread thread_;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_ACCEPT_THREAD_H_
