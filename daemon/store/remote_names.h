// Names other brokers serve (the daemon's remote[PREFIX] settings), as the store sees them: a
// Get of such a name that this broker holds no version of asks for a fetch and waits for it; the
// fetch comes back as a replica (TensorStore::BeginReplica, CommitPut), which answers the
// waiters like any publication, or as a failure (TensorStore::FailFetch).
//
// Implementations are thread-safe. RequestFetch must not block: the store calls it without its
// lock, on the thread of the Get.
#ifndef TENSORBROKER_DAEMON_REMOTE_NAMES_H_
#define TENSORBROKER_DAEMON_REMOTE_NAMES_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace tensorbroker::daemon {

// How long a Get that would not wait waits for the fetch of a peer's tensor (a Get with a wait
// of its own waits as long as it said).
inline constexpr absl::Duration kRemoteFetchWait = absl::Seconds(60);

class RemoteNames {
 public:
  virtual ~RemoteNames() = default;
  // The remote[] address that serves `name` ("node-a:7070"); nullopt for a name of this broker.
  virtual std::optional<std::string> PeerFor(absl::string_view name) const = 0;
  // Starts fetching `name` unless a fetch of it runs already.
  virtual void RequestFetch(const std::string& name) = 0;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_REMOTE_NAMES_H_
