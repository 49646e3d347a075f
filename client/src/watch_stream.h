// The client's Watcher (client.h): a Watch on a local-channel connection of its own, attached
// to the client's session, so that its events never queue behind (or in front of) the client's
// calls, and the kernel's socket buffer plus the daemon's small window are all that a watcher
// that stops reading holds. When the daemon goes away the stream reconnects through the client
// (a new session on the new daemon) and watches again after the last sequence it saw: the new
// daemon's log does not reach back that far, so the next event is a kLost.
//
// Ownership: holds the Connection it attached to (the session stays open while it watches).
// Threading: Next for one thread at a time; Close from any thread (an eventfd wakes Next).
#ifndef TENSORBROKER_CLIENT_SRC_WATCH_STREAM_H_
#define TENSORBROKER_CLIENT_SRC_WATCH_STREAM_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "client/src/connection.h"
#include "common/mutex.h"
#include "common/unique_fd.h"
#include "tensorbroker/client.h"
#include "tensorbroker/v1/local.pb.h"

namespace tensorbroker::client_internal {

class WatchStream final : public Watcher {
 public:
  // A connection to use after `failed`'s daemon went away (Client::Impl::Reconnect).
  using Reconnect = std::function<absl::StatusOr<std::shared_ptr<Connection>>(
      const std::shared_ptr<Connection>& failed)>;

  static absl::StatusOr<std::unique_ptr<WatchStream>> Open(std::shared_ptr<Connection> connection,
                                                           std::string prefix,
                                                           const WatchOptions& options,
                                                           Reconnect reconnect);

  absl::StatusOr<std::optional<WatchEvent>> Next(std::chrono::milliseconds timeout) override;
  void Close() override;
  uint64_t last_sequence() const override { return last_sequence_; }

 private:
  WatchStream(std::shared_ptr<Connection> connection, std::string prefix,
              std::optional<uint64_t> after, Reconnect reconnect, UniqueFd closed);
  // Connects, attaches the session and sends the watch.
  absl::Status Start();
  // Sends `request` (`what` it is, for messages) and waits for its answer's status.
  absl::Status Ask(const v1::LocalRequest& request, const char* what);
  // After the daemon went away: a new connection, and the watch again after what was seen.
  absl::Status Resume();
  // Waits for the socket (or Close) until `deadline`: true when the socket is readable.
  absl::StatusOr<bool> WaitReadable(std::chrono::steady_clock::time_point deadline, bool forever);

  std::shared_ptr<Connection> connection_;
  const std::string prefix_;
  std::optional<uint64_t> after_;  // what the next Start watches after
  const Reconnect reconnect_;
  const UniqueFd closed_;  // eventfd: Close
  std::atomic<bool> closing_{false};
  // Replaced by Next (Start), shut down by Close from any thread: the daemon ends the watch as
  // soon as it is closed, not when this object goes.
  Mutex socket_mu_;
  UniqueFd socket_;  // guarded by socket_mu_ for replacing; Next's thread reads it freely
  uint64_t last_sequence_ = 0;
};

}  // namespace tensorbroker::client_internal

#endif  // TENSORBROKER_CLIENT_SRC_WATCH_STREAM_H_
