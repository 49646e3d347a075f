#include "daemon/accept_thread.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/log.h"

namespace tensorbroker::daemon {

absl::StatusOr<std::unique_ptr<AcceptThread>> AcceptThread::Start(UniqueFd listener,
                                                                  int accept_flags,
                                                                  std::string what,
                                                                  Handler handle) {
  UniqueFd wake(::eventfd(0, EFD_CLOEXEC));
  if (!wake.valid()) {
    return absl::InternalError(absl::StrCat(what, ": eventfd: ", std::strerror(errno)));
  }
  return std::unique_ptr<AcceptThread>(new AcceptThread(
      std::move(listener), std::move(wake), accept_flags, std::move(what), std::move(handle)));
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
  if (thread_.joinable()) {
    const uint64_t one = 1;
    while (::write(wake_.get(), &one, sizeof(one)) < 0 && errno == EINTR) {
    }
    thread_.join();
  }
  listener_.reset();
}

void AcceptThread::Loop() {
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
      if (errno == EMFILE || errno == ENFILE) {
        Log(LogLevel::kWarning, what_, ": accept: ", std::strerror(errno),
            "; retrying in 100 ms");
        ::poll(nullptr, 0, 100);  // out of descriptors: let some close first
      }
      continue;
    }
    handle_(std::move(connection));
  }
}

}  // namespace tensorbroker::daemon
