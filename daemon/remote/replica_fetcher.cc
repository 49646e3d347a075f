#include "daemon/remote/replica_fetcher.h"

#include <cstdint>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/base/log.h"
#include "daemon/base/page_population.h"

namespace tensorbroker::daemon {

ReplicaFetcher::ReplicaFetcher(std::map<std::string, PeerAddress> remote, TransferSource* transfer,
                               PeerChannels* channels)
    : remote_(std::move(remote)), transfer_(transfer), channels_(channels) {
  if (remote_.empty()) return;
  for (size_t i = 0; i < kFetchThreads; ++i) threads_.emplace_back([this] { Work(); });
}

void ReplicaFetcher::Attach(TensorStore* store) {
  store_ = store;
  watches_ = std::make_unique<ReplicaWatches>(channels_, store,
                                              [this](const std::string& name) { Refresh(name); });
}

ReplicaFetcher::~ReplicaFetcher() {
  watches_.reset();  // its threads ask for refreshes
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& thread : threads_) thread.join();
}

const std::pair<const std::string, PeerAddress>* ReplicaFetcher::EntryFor(
    absl::string_view name) const {
  const std::pair<const std::string, PeerAddress>* best = nullptr;
  for (const auto& entry : remote_) {
    if (absl::StartsWith(name, entry.first) &&
        (best == nullptr || entry.first.size() > best->first.size())) {
      best = &entry;
    }
  }
  return best;
}

std::optional<std::string> ReplicaFetcher::PeerFor(absl::string_view name) const {
  const auto* entry = EntryFor(name);
  if (entry == nullptr) return std::nullopt;
  return entry->second.ToString();
}

void ReplicaFetcher::RequestFetch(const std::string& name) {
  {
    MutexLock lock(mu_);
    if (stopping_ || !in_flight_.insert(name).second) return;  // one fetch per name
    queue_.push_back(name);
  }
  wake_.notify_one();
}

void ReplicaFetcher::Refresh(const std::string& name) {
  {
    MutexLock lock(mu_);
    if (stopping_) return;
    if (!in_flight_.insert(name).second) {
      again_.insert(name);  // the fetch that runs may have begun before this version
      return;
    }
    queue_.push_back(name);
  }
  wake_.notify_one();
}

std::string ReplicaFetcher::OriginOf(absl::string_view name) const {
  const auto* entry = EntryFor(name);
  return entry == nullptr ? std::string() : entry->second.ToString();
}

std::optional<std::string> ReplicaFetcher::TakeNextLocked() {
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    size_t& running = running_[OriginOf(*it)];
    if (running >= kFetchesPerOrigin) continue;
    ++running;
    std::string name = std::move(*it);
    queue_.erase(it);
    return name;
  }
  return std::nullopt;
}

void ReplicaFetcher::Work() {
  while (true) {
    std::optional<std::string> name;
    {
      MutexLock lock(mu_);
      wake_.wait(lock, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || (name = TakeNextLocked()).has_value();
      });
      if (stopping_) return;
    }
    Fetch(*name);
    MutexLock lock(mu_);
    --running_[OriginOf(*name)];  // its slot is free: a name waiting for it may go
    if (again_.erase(*name) != 0) {
      queue_.push_back(*name);  // still in flight
    } else {
      in_flight_.erase(*name);
    }
    wake_.notify_all();
  }
}

void ReplicaFetcher::Fetch(const std::string& name) {
  const auto* entry = EntryFor(name);
  if (entry == nullptr || store_ == nullptr) return;
  const PeerAddress& address = entry->second;
  const std::string where = address.ToString();
  auto targets = ResolvePeerTargets(address);
  absl::Status outcome = targets.status();
  if (targets.ok()) {
    outcome = absl::NotFoundError(absl::StrCat("name '", name, "' is not published at peer ", where,
                                               " (remote[", entry->first, "])"));
    for (const std::string& target : *targets) {
      const PeerEndpoint peer{target, address.numeric ? "" : address.host,
                              targets->size() > 1 ? absl::StrCat(where, " (", target, ")") : where};
      absl::Status fetched = FetchFrom(peer, *entry, name);
      if (fetched.ok()) return;
      if (!absl::IsNotFound(fetched)) {
        outcome = fetched;
        break;  // a transfer that failed: said at once, not hidden behind the next broker
      }
    }
  }
  Log(absl::IsNotFound(outcome) ? LogLevel::kDebug : LogLevel::kWarning,
      "remote: ", outcome.message());
  store_->FailFetch(name, outcome);
}

absl::Status ReplicaFetcher::FetchFrom(const PeerEndpoint& peer,
                                       const std::pair<const std::string, PeerAddress>& entry,
                                       const std::string& name) {
  std::optional<PutTicket> ticket;
  bool current = false;  // the version here is the origin's current one already
  auto fetched = transfer_->Fetch(
      peer, name,
      [&](const RemoteTensorInfo& info) -> absl::StatusOr<absl::Span<uint8_t>> {
        const std::optional<uint64_t> held = store_->ReplicaVersion(name, peer.target);
        if (held.has_value() && *held >= info.version) {
          current = true;
          return absl::AlreadyExistsError("current");
        }
        TensorSpec spec = info.spec;
        spec.owner_uid = info.owner_uid;
        spec.readers = info.readers;
        spec.origin = ReplicaOrigin{entry.second.ToString(), peer.target, info.version,
                                    absl::ToUnixMillis(absl::Now())};
        auto begun = store_->BeginReplica(spec);
        if (!begun.ok()) return begun.status();
        ticket = *begun;
        PopulateForWriting(ticket->data, ticket->nbytes);
        return absl::MakeSpan(ticket->data, ticket->nbytes);
      },
      kFetchTimeout);
  if (current) return absl::OkStatus();
  if (!fetched.ok()) {
    if (ticket.has_value()) store_->CancelPut(*ticket);
    return fetched.status();
  }
  auto published = store_->CommitPut(*ticket);
  if (!published.ok()) return published.status();
  watches_->Follow(entry.first, peer);
  Log(LogLevel::kInfo, "remote: '", LogSafe(name), "' fetched from peer ", peer.label,
      " (origin version ", fetched->version, ", ", fetched->spec.nbytes, " bytes) as version ",
      published->version);
  return absl::OkStatus();
}

}  // namespace tensorbroker::daemon
