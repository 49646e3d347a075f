#include "daemon/store/lease_table.h"

#include "absl/strings/str_cat.h"

namespace tensorbroker::daemon {

uint64_t LeaseTable::Add(const std::string& session, uint64_t object_id) {
  const uint64_t id = next_id_++;
  leases_.emplace(id, Lease{session, object_id});
  by_session_[session].insert(id);
  return id;
}

absl::StatusOr<uint64_t> LeaseTable::ObjectOf(const std::string& session, uint64_t lease_id) const {
  auto it = leases_.find(lease_id);
  // Another session's lease gets the same answer as an unknown one: ids reveal nothing.
  if (it == leases_.end() || it->second.session != session) {
    return absl::NotFoundError(
        absl::StrCat("lease_id ", lease_id, " is not a live lease of this session"));
  }
  return it->second.object_id;
}

absl::StatusOr<uint64_t> LeaseTable::Remove(const std::string& session, uint64_t lease_id) {
  auto object_id = ObjectOf(session, lease_id);
  if (!object_id.ok()) return object_id;
  leases_.erase(lease_id);
  auto owned = by_session_.find(session);
  owned->second.erase(lease_id);
  if (owned->second.empty()) by_session_.erase(owned);
  return object_id;
}

std::vector<uint64_t> LeaseTable::RemoveSession(const std::string& session) {
  std::vector<uint64_t> objects;
  auto owned = by_session_.find(session);
  if (owned == by_session_.end()) return objects;
  for (uint64_t lease_id : owned->second) {
    auto it = leases_.find(lease_id);
    objects.push_back(it->second.object_id);
    leases_.erase(it);
  }
  by_session_.erase(owned);
  return objects;
}

size_t LeaseTable::CountForSession(const std::string& session) const {
  auto owned = by_session_.find(session);
  return owned == by_session_.end() ? 0 : owned->second.size();
}

}  // namespace tensorbroker::daemon
