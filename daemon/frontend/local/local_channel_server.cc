#include "daemon/frontend/local/local_channel_server.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <unistd.h>
#include <cerrno>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/errno_status.h"
#include "common/mutex.h"
#include "daemon/base/log.h"

namespace tensorbroker::daemon {
namespace {

constexpr uint64_t kWakeTag = 0;  // epoll data of the eventfd; connections have ids >= 1

// The server whose loop runs on this thread, if any: what it hands itself needs no wake.
thread_local const LocalChannelServer* loop_on_this_thread = nullptr;

}  // namespace

// Segment events of a session a local connection opened: handed to the loop.
class LocalChannelServer::SessionSink final : public SessionEventSink {
 public:
  SessionSink(LocalChannelServer* server, uint64_t connection_id)
      : server_(server), connection_id_(connection_id) {}
  void OnSegmentRemoved(const std::string& segment) override {
    Handoff handoff;
    handoff.kind = Handoff::Kind::kSegmentRemoved;
    handoff.connection_id = connection_id_;
    handoff.segment = segment;
    server_->Hand(std::move(handoff));
  }

 private:
  LocalChannelServer* const server_;
  const uint64_t connection_id_;
};

absl::StatusOr<std::unique_ptr<LocalChannelServer>> LocalChannelServer::Start(
    UniqueFd listener, TensorStore* store, CallMetrics* metrics, const AccessPolicy* policy,
    const ConnectionSettings& settings, HandoverHooks handover) {
  UniqueFd epoll(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll.valid()) return ErrnoStatus(errno, "epoll_create1");
  UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) return ErrnoStatus(errno, "eventfd");
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = kWakeTag;
  if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, wake.get(), &event) != 0) {
    return ErrnoStatus(errno, "epoll_ctl");
  }
  std::unique_ptr<LocalChannelServer> server(new LocalChannelServer(
      store, metrics, policy, settings, std::move(handover), std::move(epoll), std::move(wake)));
  LocalChannelServer* raw = server.get();
  try {
    server->loop_ = std::thread([raw] { raw->Loop(); });
  } catch (const std::system_error& e) {
    return absl::InternalError(absl::StrCat("local channel: no thread: ", e.what()));
  }
  auto acceptor = AcceptThread::Start(
      std::move(listener), SOCK_NONBLOCK, "local channel", [raw](UniqueFd connection) {
        std::optional<PeerCredentials> peer = PeerCredentialsOf(connection.get(), "local channel");
        if (!peer.has_value()) return;
        if (!raw->limit_.Admit(peer->uid, raw->open_connections_.load())) return;  // closed
        ++raw->open_connections_;  // only this thread adds: the check above stays true
        Handoff handoff;
        handoff.kind = Handoff::Kind::kConnection;
        handoff.socket = std::move(connection);
        handoff.peer = *peer;
        raw->Hand(std::move(handoff));
      });
  if (!acceptor.ok()) return acceptor.status();  // the destructor stops the loop
  MutexLock lock(server->mu_);                   // the loop thread reads it under the lock
  server->acceptor_ = *std::move(acceptor);
  return server;
}

LocalChannelServer::LocalChannelServer(TensorStore* store, CallMetrics* metrics,
                                       const AccessPolicy* policy,
                                       const ConnectionSettings& settings, HandoverHooks handover,
                                       UniqueFd epoll, UniqueFd wake)
    : store_(store),
      policy_(policy),
      settings_(settings),
      limit_("local channel", settings.max_connections, ::getuid()),
      metrics_(metrics),
      epoll_(std::move(epoll)),
      wake_(std::move(wake)),
      handover_(std::move(handover)) {
  MutexLock lock(wake_target_->mu);
  wake_target_->server = this;
}

LocalChannelServer::~LocalChannelServer() {
  {
    MutexLock lock(wake_target_->mu);
    wake_target_->server = nullptr;  // a watch's wake may come later than this server
  }
  Stop();
}

void LocalChannelServer::Stop() {
  AcceptThread* acceptor;
  {
    MutexLock lock(mu_);
    acceptor = acceptor_.get();
  }
  if (acceptor != nullptr) acceptor->Stop();
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  const uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof(one));
  if (loop_.joinable()) loop_.join();
}

void LocalChannelServer::Hand(Handoff handoff) {
  {
    MutexLock lock(mu_);
    if (handoff.kind == Handoff::Kind::kConnection) {
      if (stopping_) {
        --open_connections_;
        return;
      }
      handoff.connection_id = next_connection_id_++;
    }
    handoffs_.push_back(std::move(handoff));
  }
  if (loop_on_this_thread == this) return;  // the loop takes it before it waits again
  const uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof(one));
}

std::string LocalChannelServer::OpenOwnedSession(uint64_t id, int32_t pid,
                                                 const std::string& client_name,
                                                 const Principal& principal) {
  auto sink = std::make_unique<SessionSink>(this, id);
  std::string session_id = store_->OpenSession(principal, pid, client_name, sink.get());
  sinks_[id] = std::move(sink);
  return session_id;
}

absl::StatusOr<std::vector<NamedFd>> LocalChannelServer::PrepareHandover(
    const PeerCredentials& /*peer*/) {
  if (!handover_.prepare) return absl::UnimplementedError("takeover: not offered here");
  AcceptThread* acceptor;
  {
    MutexLock lock(mu_);
    acceptor = acceptor_.get();
  }
  if (acceptor != nullptr) acceptor->Stop();  // new clients wait for the successor
  return handover_.prepare();
}

void LocalChannelServer::HandoverSent(const absl::Status& sent) {
  if (handover_.finished) handover_.finished(sent);
}

std::optional<absl::StatusOr<TensorGrant>> LocalChannelServer::StartWait(
    uint64_t id, const std::string& session_id, const std::string& name,
    const VersionWanted& wanted, absl::Time deadline, uint64_t* waiter_id) {
  // The store sets the id before it can call back: the callback reads it from this cell.
  auto cell = std::make_shared<uint64_t>(0);
  absl::Time until = deadline;  // later for a peer's tensor being fetched
  auto now = store_->GetOrWait(
      session_id, name, wanted, deadline, cell.get(),
      [this, id, session_id, cell](absl::StatusOr<TensorGrant> result) {
        Handoff handoff;
        handoff.kind = Handoff::Kind::kWaitAnswered;
        handoff.connection_id = id;
        handoff.waiter_id = *cell;
        handoff.session_id = session_id;
        handoff.result = std::move(result);
        Hand(std::move(handoff));
      },
      &until);
  *waiter_id = *cell;
  if (!now.has_value()) deadlines_.emplace(until, std::make_pair(id, *waiter_id));
  return now;
}

std::function<void()> LocalChannelServer::WatchWaker(uint64_t id) {
  return [target = wake_target_, id] {
    MutexLock lock(target->mu);
    if (target->server == nullptr) return;
    Handoff handoff;
    handoff.kind = Handoff::Kind::kWatchReady;
    handoff.connection_id = id;
    target->server->Hand(std::move(handoff));
  };
}

void LocalChannelServer::AnswerOthersFirst(uint64_t id) { TakeHandoffs(id); }

void LocalChannelServer::WaitEnded(uint64_t id, uint64_t waiter_id, absl::Time deadline) {
  auto [first, last] = deadlines_.equal_range(deadline);
  for (auto it = first; it != last; ++it) {
    if (it->second == std::make_pair(id, waiter_id)) {
      deadlines_.erase(it);
      return;
    }
  }
}

int LocalChannelServer::NextTimeoutMs() const {
  if (deadlines_.empty() && handshakes_.empty()) return -1;
  absl::Time next = absl::InfiniteFuture();
  if (!deadlines_.empty()) next = deadlines_.begin()->first;
  if (!handshakes_.empty()) next = std::min(next, handshakes_.begin()->first);
  const absl::Duration left = next - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))));
}

void LocalChannelServer::Loop() {
  loop_on_this_thread = this;
  epoll_event events[64];
  while (true) {
    int timeout_ms = NextTimeoutMs();
    {
      MutexLock lock(mu_);
      if (!handoffs_.empty()) timeout_ms = 0;  // handed over on this thread, without a wake
    }
    if (ledger_.has_refunds() && !stalled_.empty()) timeout_ms = 0;  // ResumeStalled's rounds
    const int ready = ::epoll_wait(epoll_.get(), events, 64, timeout_ms);
    if (ready < 0 && errno != EINTR) {
      Log(LogLevel::kError, "local channel: epoll_wait: ", std::strerror(errno));
      break;
    }
    for (int i = 0; i < ready; ++i) {
      if (events[i].data.u64 == kWakeTag) {
        uint64_t count;
        (void)!::read(wake_.get(), &count, sizeof(count));
        continue;
      }
      auto it = connections_.find(events[i].data.u64);
      if (it != connections_.end()) Serve(it->second.get(), events[i].events);
    }
    TakeHandoffs();
    ExpireWaits();
    ExpireHandshakes();
    ResumeStalled();
    MutexLock lock(mu_);
    if (stopping_) break;
  }
  // Closing every connection ends the sessions they opened and cancels their waits.
  while (!connections_.empty()) Drop(connections_.begin()->first);
  TakeHandoffs();  // answers that raced with the drops: their leases are given back
}

void LocalChannelServer::TakeHandoffs(std::optional<uint64_t> except) {
  std::vector<Handoff> taken;
  {
    MutexLock lock(mu_);
    taken.swap(handoffs_);
  }
  std::vector<Handoff> deferred;
  for (Handoff& handoff : taken) {
    if (except.has_value() && handoff.connection_id == *except) {
      deferred.push_back(std::move(handoff));
      continue;
    }
    auto it = connections_.find(handoff.connection_id);
    switch (handoff.kind) {
      case Handoff::Kind::kConnection: {
        auto connection = std::make_unique<LocalConnection>(
            handoff.connection_id, std::move(handoff.socket), handoff.peer, policy_, store_, this,
            metrics_, &ledger_);
        epoll_event event{};
        event.events = EPOLLIN;
        event.data.u64 = handoff.connection_id;
        if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, connection->fd(), &event) != 0) {
          Log(LogLevel::kWarning, "local channel: epoll_ctl: ", std::strerror(errno));
          --open_connections_;
          break;
        }
        connection->epoll_events = EPOLLIN;
        connections_.emplace(handoff.connection_id, std::move(connection));
        handshakes_.emplace(absl::Now() + settings_.handshake_timeout, handoff.connection_id);
        break;
      }
      case Handoff::Kind::kWaitAnswered: {
        if (it == connections_.end()) {
          // The connection went before its answer: give the lease back.
          if (handoff.result.ok()) {
            (void)store_->Release(handoff.session_id, handoff.result->lease_id);
          }
          break;
        }
        LocalConnection* connection = it->second.get();
        if (!connection->FinishWait(handoff.waiter_id, std::move(handoff.result))) {
          Drop(handoff.connection_id);
        } else {
          WatchWrites(connection);
        }
        break;
      }
      case Handoff::Kind::kWatchReady:
        if (it == connections_.end()) break;
        if (!it->second->PumpWatches()) {
          Drop(handoff.connection_id);
        } else {
          WatchWrites(it->second.get());
        }
        break;
      case Handoff::Kind::kSegmentRemoved:
        if (it == connections_.end()) break;
        if (!it->second->SegmentRemoved(handoff.segment)) {
          Drop(handoff.connection_id);
        } else {
          WatchWrites(it->second.get());
        }
        break;
    }
  }
  if (!deferred.empty()) {
    MutexLock lock(mu_);  // ahead of what came meanwhile, in their order
    handoffs_.insert(handoffs_.begin(), std::make_move_iterator(deferred.begin()),
                     std::make_move_iterator(deferred.end()));
  }
}

void LocalChannelServer::ExpireWaits() {
  const absl::Time now = absl::Now();
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    const auto [connection_id, waiter_id] = deadlines_.begin()->second;
    deadlines_.erase(deadlines_.begin());
    auto it = connections_.find(connection_id);
    if (it == connections_.end()) continue;
    LocalConnection* connection = it->second.get();
    auto wait = connection->waits().find(waiter_id);
    if (wait == connection->waits().end()) continue;  // answered already
    if (!store_->CancelWait(waiter_id)) continue;     // its answer is queued as a handoff
    const absl::Status ran_out = WaitRanOut(wait->second.name, wait->second.wanted);
    if (!connection->FinishWait(
            waiter_id,
            absl::Status(ran_out.code(), absl::StrCat("get.wait_ms: ", ran_out.message())))) {
      Drop(connection_id);
    } else {
      WatchWrites(connection);
    }
  }
}

void LocalChannelServer::ExpireHandshakes() {
  const absl::Time now = absl::Now();
  while (!handshakes_.empty() && handshakes_.begin()->first <= now) {
    const uint64_t connection_id = handshakes_.begin()->second;
    handshakes_.erase(handshakes_.begin());
    auto it = connections_.find(connection_id);
    if (it == connections_.end() || it->second->has_session()) continue;
    Log(LogLevel::kInfo, "local channel: closing a connection of pid=", it->second->peer().pid,
        " uid=", it->second->peer().uid, ": no session within the handshake timeout (",
        absl::FormatDuration(settings_.handshake_timeout), ")");
    Drop(connection_id);
  }
}

void LocalChannelServer::Serve(LocalConnection* connection, uint32_t events) {
  const uint64_t id = connection->id();
  if ((events & EPOLLOUT) != 0) {
    // Room again (or the client read): its watches may send what they held back.
    if (!connection->Flush() || !connection->PumpWatches()) return Drop(id);
  }
  if (connection->wants_to_write()) {
    // Back-pressure: no request is read while replies wait. A client that hung up (or broke
    // the socket) will take none of them.
    if ((events & (EPOLLHUP | EPOLLERR)) != 0) return Drop(id);
  } else if ((events & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0) {
    // One request per wake-up: epoll is level-triggered, so more come with the next wait (no
    // busy client starves the others, and no read is spent to learn the socket is empty).
    if (!connection->ReadRequest()) return Drop(id);
  }
  WatchWrites(connection);
}

void LocalChannelServer::WatchWrites(LocalConnection* connection) {
  if (connection->stalled()) {
    stalled_.insert(connection->id());
  } else {
    stalled_.erase(connection->id());
  }
  const uint32_t wanted = !connection->wants_to_write() ? uint32_t{EPOLLIN}
                          : connection->stalled()       ? uint32_t{EPOLLOUT | EPOLLET}
                                                        : uint32_t{EPOLLOUT};
  if (connection->epoll_events == wanted) return;
  connection->epoll_events = wanted;
  epoll_event event{};
  event.events = wanted;
  event.data.u64 = connection->id();
  (void)::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, connection->fd(), &event);
}

void LocalChannelServer::ReclaimDescriptors(uid_t uid) {
  for (auto& [id, connection] : connections_) {
    if (connection->peer().uid == uid) connection->ReclaimReceived();
  }
}

void LocalChannelServer::ResumeStalled() {
  for (int round = 0; round < 4; ++round) {
    const std::set<uid_t> refunded = ledger_.TakeRefunded();
    if (refunded.empty() || stalled_.empty()) return;
    const std::vector<uint64_t> stalled(stalled_.begin(), stalled_.end());
    for (uint64_t id : stalled) {
      auto it = connections_.find(id);
      if (it == connections_.end()) {
        stalled_.erase(id);
        continue;
      }
      LocalConnection* connection = it->second.get();
      if (refunded.count(connection->peer().uid) == 0) continue;
      if (!connection->Flush() || !connection->PumpWatches()) {
        Drop(id);
        continue;
      }
      WatchWrites(connection);
    }
  }
}

void LocalChannelServer::Drop(uint64_t connection_id) {
  auto it = connections_.find(connection_id);
  if (it == connections_.end()) return;
  (void)::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, it->second->fd(), nullptr);
  stalled_.erase(connection_id);
  connections_.erase(it);  // closes the session it opened, cancels its waits
  sinks_.erase(connection_id);
  --open_connections_;
}

}  // namespace tensorbroker::daemon
