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

  // How many slots of the tables whose principal passes `may_read` name `object` (each scanned
  // with sequentially consistent loads, while their processes write).
  uint32_t CountHolding(uint64_t object, const MayRead& may_read) const;
  bool AnyHolds(uint64_t object, const MayRead& may_read) const;
  // Calls `visit(principal, object)` for every nonzero slot of every table.
  void ForEachSlot(const std::function<void(const Principal&, uint64_t)>& visit) const;

  bool empty() const { return tables_.empty(); }
  size_t size() const { return tables_.size(); }

 private:
  struct Table {
    Principal principal;
    MemfdSegment memfd;
  };
  std::map<std::string, Table> tables_;  // by session
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_STORE_LEASE_SLOT_TABLES_H_
