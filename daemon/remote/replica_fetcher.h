// The fetching side of remote prefixes: which peer serves a name (remote[PREFIX] = ADDRESS, the
// longest prefix wins), and the fetches the store asks for (RemoteNames). One fetch per name at
// a time, whoever asks; at most kFetchesPerOrigin from one address and kFetchThreads in all run
// at once, the rest wait their turn (the first queued whose address has a slot free goes
// first), so that slow origins hold their own slots, not every other origin's; a transfer that
// stalls is cut (transfer_pace.h). A fetch
// resolves the address anew, asks each broker it names in turn (one that has no such tensor:
// the next), copies the bytes straight into a replica's memory (TensorStore::BeginReplica) and
// publishes it (CommitPut), which answers every Get waiting for it; a failure publishes nothing
// and answers them with the reason (TensorStore::FailFetch). Once a replica is here, the
// watches (replica_watches.h) keep it fresh: they ask for a refresh when the origin has a newer
// version, which fetches it even if a fetch of the name runs already (once that one ends).
//
// Ownership: Attach the store before serving; the fetcher must be destroyed (its threads
// joined) before the store and the transfer. Threading: thread-safe; RequestFetch never blocks.
#ifndef TENSORBROKER_DAEMON_REPLICA_FETCHER_H_
#define TENSORBROKER_DAEMON_REPLICA_FETCHER_H_

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "daemon/remote/peer_address.h"
#include "daemon/remote/peer_channels.h"
#include "daemon/remote/replica_watches.h"
#include "daemon/remote/transfer_source.h"
#include "daemon/store/remote_names.h"
#include "daemon/store/tensor_store.h"

namespace tensorbroker::daemon {

inline constexpr size_t kFetchThreads = 16;
inline constexpr size_t kFetchesPerOrigin = 2;
// One transfer's limit (the bytes of a large tensor over a slow link included).
inline constexpr absl::Duration kFetchTimeout = absl::Minutes(10);

class ReplicaFetcher final : public RemoteNames {
 public:
  // `channels` (the watches' calls) and `transfer` outlive this.
  ReplicaFetcher(std::map<std::string, PeerAddress> remote, TransferSource* transfer,
                 PeerChannels* channels);
  ~ReplicaFetcher() override;
  ReplicaFetcher(const ReplicaFetcher&) = delete;
  ReplicaFetcher& operator=(const ReplicaFetcher&) = delete;

  // The store replicas go to; before the first RequestFetch.
  void Attach(TensorStore* store);

  std::optional<std::string> PeerFor(absl::string_view name) const override;
  void RequestFetch(const std::string& name) override;
  // Fetches the current version of `name` now, or after the fetch of it that runs.
  void Refresh(const std::string& name);

 private:
  // The remote[] entry of `name`, or nullptr.
  const std::pair<const std::string, PeerAddress>* EntryFor(absl::string_view name) const;
  void Work();
  // The first queued name whose address has a fetch slot free (taken now); nullopt when none.
  std::optional<std::string> TakeNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The remote[] address (as configured) that serves `name`; "" when none.
  std::string OriginOf(absl::string_view name) const;
  // One fetch, to its end (published, or FailFetch).
  void Fetch(const std::string& name);
  // From the one broker `peer`: OK (published), or why not.
  absl::Status FetchFrom(const PeerEndpoint& peer,
                         const std::pair<const std::string, PeerAddress>& entry,
                         const std::string& name);

  const std::map<std::string, PeerAddress> remote_;
  TransferSource* const transfer_;
  PeerChannels* const channels_;
  TensorStore* store_ = nullptr;
  std::unique_ptr<ReplicaWatches> watches_;  // stopped first
  Mutex mu_;
  CondVar wake_;
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> in_flight_ ABSL_GUARDED_BY(mu_);        // queued or running
  std::set<std::string> again_ ABSL_GUARDED_BY(mu_);            // in flight, to fetch once more
  std::map<std::string, size_t> running_ ABSL_GUARDED_BY(mu_);  // fetches per address now
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_REPLICA_FETCHER_H_
