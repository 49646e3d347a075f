// Who holds which tensor: every lease maps to the session that holds it and the tensor object
// it keeps alive. Lease ids are never reused within a daemon's life, so a stale or forged id
// cannot release someone else's newer lease by accident.
//
// Not thread-safe: the TensorStore calls it only while holding its own lock.
#ifndef TENSORBROKER_DAEMON_LEASE_TABLE_H_
#define TENSORBROKER_DAEMON_LEASE_TABLE_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tensorbroker::daemon {

class LeaseTable {
 public:
  // Records a new lease of `session` on `object_id` and returns its id (never 0).
  uint64_t Add(const std::string& session, uint64_t object_id);
  // The object `lease_id` held by `session` keeps alive; the same errors as Remove.
  absl::StatusOr<uint64_t> ObjectOf(const std::string& session, uint64_t lease_id) const;
  // Ends `lease_id` held by `session`; returns the object it kept alive. NOT_FOUND for an
  // unknown lease and for a lease of another session alike (ids are no oracle).
  absl::StatusOr<uint64_t> Remove(const std::string& session, uint64_t lease_id);
  // Ends every lease of `session`; returns their objects (one entry per lease).
  std::vector<uint64_t> RemoveSession(const std::string& session);

  size_t size() const { return leases_.size(); }
  size_t CountForSession(const std::string& session) const;

 private:
  struct Lease {
    std::string session;
    uint64_t object_id;
  };
  uint64_t next_id_ = 1;
  std::map<uint64_t, Lease> leases_;
  std::map<std::string, std::set<uint64_t>> by_session_;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_LEASE_TABLE_H_
