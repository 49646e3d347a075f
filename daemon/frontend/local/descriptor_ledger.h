// How many segment descriptors the local channel has sent to each uid's connections that their
// clients may not have received yet. A descriptor in a message the client has not read is held
// by the kernel in the client's socket queue and charged to the daemon's user (unix(7): past
// RLIMIT_NOFILE of them, every send of a descriptor fails with ETOOMANYREFS), so a client that
// asks for descriptors and never reads could otherwise make the daemon hold them without bound.
//
// Bounds: a connection may have at most `per_connection` descriptors in flight and a uid at
// most `per_uid` over all its connections, except that a connection with none in flight may
// always send one message (so no client is starved by its siblings: a uid's total is at most
// per_uid plus one message's descriptors per connection). A connection learns that its client
// received everything when its socket's send queue is empty (SIOCOUTQ; see ReclaimReceived
// for the byte the kernel still counts when it wakes us), and refunds then.
//
// Threading: the local channel's event-loop thread only.
#ifndef TENSORBROKER_DAEMON_DESCRIPTOR_LEDGER_H_
#define TENSORBROKER_DAEMON_DESCRIPTOR_LEDGER_H_

#include <sys/types.h>

#include <cstddef>
#include <map>
#include <set>

namespace tensorbroker::daemon {

// The default bounds.
inline constexpr size_t kMaxDescriptorsInFlightPerConnection = 64;
inline constexpr size_t kMaxDescriptorsInFlightPerUid = 1024;

class DescriptorLedger {
 public:
  DescriptorLedger(size_t per_connection = kMaxDescriptorsInFlightPerConnection,
                   size_t per_uid = kMaxDescriptorsInFlightPerUid);
  DescriptorLedger(const DescriptorLedger&) = delete;
  DescriptorLedger& operator=(const DescriptorLedger&) = delete;

  // Whether a connection of `uid` that has `in_flight` descriptors unreceived may send a
  // message carrying `n` more.
  bool MaySend(uid_t uid, size_t in_flight, size_t n) const;
  // Whether `uid` is at its bound (a connection of it that may not send should first have the
  // uid's other connections refund what their clients received).
  bool UidAtBound(uid_t uid, size_t n) const;
  void Charge(uid_t uid, size_t n);
  void Refund(uid_t uid, size_t n);
  size_t InFlight(uid_t uid) const;
  size_t InFlightTotal() const { return total_; }

  // The uids that were refunded since the last call (their stalled connections may go on).
  std::set<uid_t> TakeRefunded();
  bool has_refunds() const { return !refunded_.empty(); }

 private:
  const size_t per_connection_;
  const size_t per_uid_;
  std::map<uid_t, size_t> in_flight_;  // no zero entries
  size_t total_ = 0;
  std::set<uid_t> refunded_;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_DESCRIPTOR_LEDGER_H_
