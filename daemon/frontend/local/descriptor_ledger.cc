#include "daemon/frontend/local/descriptor_ledger.h"

#include <algorithm>
#include <utility>

namespace tensorbroker::daemon {

DescriptorLedger::DescriptorLedger(size_t per_connection, size_t per_uid)
    : per_connection_(per_connection), per_uid_(per_uid) {}

bool DescriptorLedger::MaySend(uid_t uid, size_t in_flight, size_t n) const {
  if (n == 0 || in_flight == 0) return true;
  return in_flight + n <= per_connection_ && !UidAtBound(uid, n);
}

bool DescriptorLedger::UidAtBound(uid_t uid, size_t n) const {
  return InFlight(uid) + n > per_uid_;
}

void DescriptorLedger::Charge(uid_t uid, size_t n) {
  if (n == 0) return;
  in_flight_[uid] += n;
  total_ += n;
}

void DescriptorLedger::Refund(uid_t uid, size_t n) {
  auto it = in_flight_.find(uid);
  if (n == 0 || it == in_flight_.end()) return;
  n = std::min(n, it->second);
  it->second -= n;
  total_ -= n;
  if (it->second == 0) in_flight_.erase(it);
  refunded_.insert(uid);
}

size_t DescriptorLedger::InFlight(uid_t uid) const {
  auto it = in_flight_.find(uid);
  return it == in_flight_.end() ? 0 : it->second;
}

std::set<uid_t> DescriptorLedger::TakeRefunded() { return std::exchange(refunded_, {}); }

}  // namespace tensorbroker::daemon
