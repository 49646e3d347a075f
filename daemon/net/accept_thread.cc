#include "daemon/net/accept_thread.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "daemon/base/log.h"

namespace tensorbroker::daemon {

absl::StatusOr<std::unique_ptr<AcceptThread>> AcceptThread::Start(UniqueFd listener,
                                                                  int accept_flags,
                                                                  std::string what,
                                                                  Handler handle) {
  UniqueFd wake(::eventfd(0, EFD_CLOEXEC));
  if (!wake.valid()) {
    return absl::InternalError(absl::StrCat(what, ": eventfd: ", std::strerror(errno)));
  }
  try {
    return std::unique_ptr<AcceptThread>(new AcceptThread(
        std::move(listener), std::move(wake), accept_flags, std::move(what), std::move(handle)));
  } catch (const std::system_error& e) {  // no thread could be started
    return absl::InternalError(absl::StrCat("cannot start a thread: ", e.what()));
  }
}

AcceptThread::AcceptThread(UniqueFd listener, UniqueFd wake, int accept_flags, std::string what,
                           Handler handle)
    : listener_(std::move(listener)),
      wake_(std::move(wake)),
      accept_flags_(accept_flags | SOCK_CLOEXEC),
      what_(std::move(what)),
      handle_(std::move(handle)),
      thread_([this] { Loop(); }) {}

AcceptThread::~AcceptThread() { Stop(); }

void AcceptThread::Stop() {
  MutexLock lock(stop_mu_);
  if (thread_.joinable()) {
    const uint64_t one = 1;
    while (::write(wake_.get(), &one, sizeof(one)) < 0 && errno == EINTR) {
    }
    thread_.join();
  }
  listener_.reset();
}

void AcceptThread::Loop() {
  bool out_of_descriptors = false;  // warned once per shortage, not once per retry
  for (;;) {
    pollfd fds[2] = {{listener_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      Log(LogLevel::kError, what_, ": poll: ", std::strerror(errno), "; accepting no more");
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    UniqueFd connection(::accept4(listener_.get(), nullptr, nullptr, accept_flags_));
    if (!connection.valid()) {
      const int error = errno;
      // Gone before it was accepted, or interrupted: nothing to wait for.
      if (error == EAGAIN || error == EWOULDBLOCK || error == EINTR || error == ECONNABORTED ||
          error == EPROTO) {
        continue;
      }
      if ((error == EMFILE || error == ENFILE) && !out_of_descriptors) {
        out_of_descriptors = true;
        Log(LogLevel::kWarning, what_, ": accept: ", std::strerror(error),
            "; new connections wait until descriptors are free");
      } else if (error != EMFILE && error != ENFILE) {
        Log(LogLevel::kWarning, what_, ": accept: ", std::strerror(error));
      }
      ::poll(nullptr, 0, 100);  // let the shortage pass rather than spin on it
      continue;
    }
    if (out_of_descriptors) {
      out_of_descriptors = false;
      Log(LogLevel::kNotice, what_, ": accepting again");
    }
    handle_(std::move(connection));
  }
}

}  // namespace tensorbroker::daemon
