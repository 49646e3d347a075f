// The lease tables of issue 34 (docs/architecture.md, "Reads without a round trip"): one per
// session that asked for one, a sealed memfd of kLeaseSlotsPerTable slots (common/lease_slots.h)
// that the daemon makes and maps, and hands read-write to that session's process alone, which
// writes in it the versions it holds. The daemon only reads the slots: before it frees a version
// it asks whether a table of a principal that may read the version names it. Slots are only
// data from another process: a slot naming a version its principal may not read, or no version
// at all, pins nothing, so a process pins at most kLeaseSlotsPerTable versions it may read.
//
// Ownership: owns the memfds; a table goes with its session (CloseSession), and from then on
// pins nothing. Not thread-safe: the TensorStore calls it under its lock.
#ifndef TENSORBROKER_DAEMON_STORE_LEASE_SLOT_TABLES_H_
#define TENSORBROKER_DAEMON_STORE_LEASE_SLOT_TABLES_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "daemon/identity/principal.h"
#include "daemon/memory/memfd_segment.h"

namespace tensorbroker::daemon {

// The versions one process may hold through its table at once (its quota of table leases; past
// it the client takes leases from the daemon as before).
inline constexpr uint32_t kLeaseSlotsPerTable = 1024;

class LeaseSlotTables {
 public:
  using MayRead = std::function<bool(const Principal&)>;

  // The table of `session` (made on its first call). RESOURCE_EXHAUSTED when memory cannot hold
  // it.
  absl::StatusOr<const MemfdSegment*> Open(const std::string& session, const Principal& principal);
  // The table of `session`; nullptr when it has none.
  const MemfdSegment* Find(const std::string& session) const;
  // Drops the table of `session`; false when it had none.
  bool Close(const std::string& session);

  // Whether a slot of a table whose principal passes `may_read` names `object` (each table
  // scanned with sequentially consistent loads, while its process writes).
  bool AnyHolds(uint64_t object, const MayRead& may_read) const;
  // How many slots name each object, over one scan of every table, counting a slot only when
  // `may_read(principal of its table, object)`: what a question about many objects asks (one
  // scan per table, however many objects, so that a process pinning its whole quota costs the
  // daemon one table scan per question, not one per pinned version).
  using MayReadObject = std::function<bool(const Principal&, uint64_t object)>;
  absl::flat_hash_map<uint64_t, uint32_t> Holdings(const MayReadObject& may_read) const;

  // Tables scanned since the start (each kLeaseSlotsPerTable loads): the daemon's cost of
  // keeping lease tables, which tests bound.
  uint64_t table_scans() const { return table_scans_; }

  bool empty() const { return tables_.empty(); }
  size_t size() const { return tables_.size(); }

 private:
  struct Table {
    Principal principal;
    MemfdSegment memfd;
  };
  std::map<std::string, Table> tables_;  // by session
  mutable uint64_t table_scans_ = 0;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_STORE_LEASE_SLOT_TABLES_H_
