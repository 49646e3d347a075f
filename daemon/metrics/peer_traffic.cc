#include "daemon/metrics/peer_traffic.h"

namespace tensorbroker::daemon {

PeerCounters* PeerTraffic::For(const std::string& peer) {
  MutexLock lock(mu_);
  auto it = by_name_.find(peer);
  if (it == by_name_.end()) {
    const bool full = by_name_.size() >= kMaxPeerNames;
    if (full) it = by_name_.find(kOtherPeers);
    if (it == by_name_.end()) {
      it =
          by_name_.emplace(full ? std::string(kOtherPeers) : peer, std::make_unique<PeerCounters>())
              .first;
    }
  }
  return it->second.get();
}

std::vector<PeerTrafficRow> PeerTraffic::Snapshot() const {
  MutexLock lock(mu_);
  std::vector<PeerTrafficRow> rows;
  rows.reserve(by_name_.size());
  for (const auto& [name, counters] : by_name_) {
    rows.push_back({name, counters->calls.load(std::memory_order_relaxed),
                    counters->sent_bytes.load(std::memory_order_relaxed)});
  }
  return rows;
}

}  // namespace tensorbroker::daemon
