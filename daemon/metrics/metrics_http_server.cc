#include "daemon/metrics/metrics_http_server.h"

#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/errno_status.h"
#include "daemon/base/log.h"
#include "daemon/metrics/metrics_http_request.h"
#include "daemon/net/listen_address.h"
#include "daemon/net/tcp_listener.h"

namespace tensorbroker::daemon {
namespace {

// epoll data of the two sockets that are not connections (connection ids count from 1).
constexpr uint64_t kWakeTag = 0;
constexpr uint64_t kListenerTag = ~uint64_t{0};
// After the answer: how long what the client still sends is read and dropped (see Connection).
constexpr absl::Duration kDrainLimit = absl::Milliseconds(200);
// A burst of connections waits in the kernel's queue, not in the clients' SYN retries (1 s).
constexpr int kBacklog = static_cast<int>(MetricsHttpServer::kMaxConnections);

}  // namespace

// One client's connection (non-blocking), driven by the loop: it reads the request, writes the
// answer as fast as the client takes it, then ends gracefully: our side is shut first and what
// the client still sends is read and dropped until it closes (at most kDrainLimit), so that
// closing with unread bytes does not reset the connection and destroy the answer before the
// client reads it. Every step must be done by one deadline, kConnectionLimit after the accept.
class MetricsHttpServer::Connection {
 public:
  enum class Phase { kRequest, kAnswer, kDrain, kDone };

  Connection(UniqueFd socket, absl::Time deadline)
      : socket_(std::move(socket)), deadline_(deadline) {}

  int fd() const { return socket_.get(); }
  absl::Time deadline() const { return deadline_; }
  Phase phase() const { return phase_; }

  // Reads what has arrived; a complete request is answered (metrics_http_request.h), with
  // `render` for /metrics.
  void OnReadable(absl::FunctionRef<std::string()> render) {
    char buffer[1024];
    while (phase_ == Phase::kRequest || phase_ == Phase::kDrain) {
      const ssize_t n = ::recv(fd(), buffer, sizeof(buffer), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n <= 0) {  // closed (early, or after the answer as it should), or reset
        phase_ = Phase::kDone;
        return;
      }
      if (phase_ == Phase::kDrain) continue;
      std::optional<std::string> answer = TakeMetricsRequestBytes(
          &request_, absl::string_view(buffer, static_cast<size_t>(n)), render);
      if (answer.has_value()) StartAnswer(*std::move(answer));
    }
  }

  // Sends as much of the answer as the client takes now.
  void OnWritable() {
    while (phase_ == Phase::kAnswer && sent_ < answer_.size()) {
      const ssize_t n = ::send(fd(), answer_.data() + sent_, answer_.size() - sent_, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n <= 0) {  // the scraper went away
        phase_ = Phase::kDone;
        return;
      }
      sent_ += static_cast<size_t>(n);
    }
    if (phase_ != Phase::kAnswer) return;
    ::shutdown(fd(), SHUT_WR);
    phase_ = Phase::kDrain;
    deadline_ = std::min(deadline_, absl::Now() + kDrainLimit);
    answer_.clear();
  }

 private:
  void StartAnswer(std::string answer) {
    request_.clear();
    answer_ = std::move(answer);
    phase_ = Phase::kAnswer;
    OnWritable();
  }

  const UniqueFd socket_;
  absl::Time deadline_;
  Phase phase_ = Phase::kRequest;
  std::string request_;
  std::string answer_;
  size_t sent_ = 0;
};

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    absl::string_view address, Render render) {
  auto where = ParseListenAddress(address);
  if (!where.ok()) return where.status();
  auto listener = ListenTcp(*where, "--metrics-listen", address, kBacklog);
  if (!listener.ok()) return listener.status();
  std::string bound = LocalAddressOf(listener->get());
  UniqueFd epoll(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll.valid()) return ErrnoStatus(errno, "metrics: epoll_create1");
  UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) return ErrnoStatus(errno, "metrics: eventfd");
  for (const auto& [fd, tag] : {std::pair<int, uint64_t>{listener->get(), kListenerTag},
                                std::pair<int, uint64_t>{wake.get(), kWakeTag}}) {
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.u64 = tag;
    if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, fd, &event) != 0) {
      return ErrnoStatus(errno, "metrics: epoll_ctl");
    }
  }
  std::unique_ptr<MetricsHttpServer> server(
      new MetricsHttpServer(std::move(bound), std::move(render), *std::move(listener),
                            std::move(epoll), std::move(wake)));
  MetricsHttpServer* raw = server.get();
  try {
    server->loop_ = std::thread([raw] { raw->Loop(); });
  } catch (const std::system_error& e) {
    return absl::InternalError(absl::StrCat("metrics: cannot start a thread: ", e.what()));
  }
  return server;
}

MetricsHttpServer::MetricsHttpServer(std::string bound_address, Render render, UniqueFd listener,
                                     UniqueFd epoll, UniqueFd wake)
    : bound_address_(std::move(bound_address)),
      render_(std::move(render)),
      listener_(std::move(listener)),
      epoll_(std::move(epoll)),
      wake_(std::move(wake)) {}

MetricsHttpServer::~MetricsHttpServer() {
  if (loop_.joinable()) {
    const uint64_t one = 1;
    while (::write(wake_.get(), &one, sizeof(one)) < 0 && errno == EINTR) {
    }
    loop_.join();
  }
}

void MetricsHttpServer::Loop() {
  epoll_event events[64];
  for (;;) {
    const int ready = ::epoll_wait(epoll_.get(), events, 64, NextTimeoutMs());
    if (ready < 0 && errno != EINTR) {
      Log(LogLevel::kError, "metrics: epoll_wait: ", std::strerror(errno), "; serving no more");
      return;
    }
    for (int i = 0; i < ready; ++i) {
      const uint64_t tag = events[i].data.u64;
      if (tag == kWakeTag) return;  // stopping
      if (tag == kListenerTag) {
        AcceptAll();
      } else {
        Serve(tag, events[i].events);
      }
    }
    CloseExpired();
  }
}

void MetricsHttpServer::AcceptAll() {
  for (size_t accepted = 0; accepted < kMaxConnections; ++accepted) {
    UniqueFd socket(::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!socket.valid()) {
      const int error = errno;
      // Gone before it was accepted, or interrupted: try the next one.
      if (error == EINTR || error == ECONNABORTED || error == EPROTO) continue;
      if (error == EMFILE || error == ENFILE || error == ENOBUFS || error == ENOMEM) {
        // Stop watching the listener for a moment rather than spin on it (see NextTimeoutMs).
        Log(LogLevel::kWarning, "metrics: accept: ", std::strerror(error),
            "; new connections wait 100 ms");
        accept_paused_until_ = absl::Now() + absl::Milliseconds(100);
        epoll_event event{};
        event.data.u64 = kListenerTag;
        ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, listener_.get(), &event);
      } else if (error != EAGAIN && error != EWOULDBLOCK) {
        Log(LogLevel::kWarning, "metrics: accept: ", std::strerror(error));
      }
      return;
    }
    const uint64_t id = next_id_++;
    auto connection =
        std::make_unique<Connection>(std::move(socket), absl::Now() + kConnectionLimit);
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.u64 = id;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, connection->fd(), &event) != 0) {
      Log(LogLevel::kWarning, "metrics: epoll_ctl: ", std::strerror(errno));
      continue;  // the connection closes here
    }
    connections_.emplace(id, std::move(connection));
    if (connections_.size() > kMaxConnections) {
      if (!crowded_) {
        crowded_ = true;
        Log(LogLevel::kWarning, "metrics: ", kMaxConnections,
            " connections open; closing the oldest to take new ones");
      }
      Close(connections_.begin()->first);
    }
  }
}

void MetricsHttpServer::Serve(uint64_t id, uint32_t events) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return;  // closed earlier in this round
  Connection& connection = *it->second;
  const bool was_answering = connection.phase() == Connection::Phase::kAnswer;
  if (was_answering) {
    if ((events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) != 0) connection.OnWritable();
  } else if ((events & (EPOLLIN | EPOLLERR | EPOLLHUP)) != 0) {
    connection.OnReadable([this] { return render_(); });
  }
  if (connection.phase() == Connection::Phase::kDone) {
    Close(id);
  } else if (was_answering != (connection.phase() == Connection::Phase::kAnswer)) {
    Watch(id, connection);
  }
}

// What the loop waits for on `connection`: the client's bytes, or room to send it the answer.
void MetricsHttpServer::Watch(uint64_t id, const Connection& connection) {
  epoll_event event{};
  event.events = connection.phase() == Connection::Phase::kAnswer ? EPOLLOUT : EPOLLIN;
  event.data.u64 = id;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, connection.fd(), &event);
}

void MetricsHttpServer::Close(uint64_t id) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  // Closing the descriptor removes it from the epoll set.
  connections_.erase(it);
  if (connections_.empty()) crowded_ = false;
}

void MetricsHttpServer::CloseExpired() {
  const absl::Time now = absl::Now();
  for (auto it = connections_.begin(); it != connections_.end();) {
    if (it->second->deadline() <= now) {
      it = connections_.erase(it);
    } else {
      ++it;
    }
  }
  if (connections_.empty()) crowded_ = false;
  if (accept_paused_until_ != absl::InfinitePast() && accept_paused_until_ <= now) {
    accept_paused_until_ = absl::InfinitePast();
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.u64 = kListenerTag;
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, listener_.get(), &event);
  }
}

// Milliseconds until the next deadline (rounded up), or -1 for none.
int MetricsHttpServer::NextTimeoutMs() const {
  absl::Time next = absl::InfiniteFuture();
  for (const auto& [id, connection] : connections_) next = std::min(next, connection->deadline());
  if (accept_paused_until_ != absl::InfinitePast()) next = std::min(next, accept_paused_until_);
  if (next == absl::InfiniteFuture()) return -1;
  const absl::Duration left = next - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))));
}

}  // namespace tensorbroker::daemon
