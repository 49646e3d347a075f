// The lease tables of issue 34 (docs/architecture.md, "Reads without a round trip"): one per
// session that asked for one, a sealed memfd of kLeaseSlotsPerTable slots (common/lease_slots.h)
// that the daemon makes and maps, and hands read-write to that session's process alone, which
// writes in it the pin tokens of the versions it holds (each version's token is random, and
// readable only in the directories of the uids that may read it). The daemon only reads the
// slots: before it frees a version it asks which tables of principals that may read the version
// name its token. Slots are only data from another process: a value that is no version's token,
// or the token of one its principal may not read, pins nothing, so a process pins at most
// kLeaseSlotsPerTable versions it may read, and only versions it saw in its directory.
//
// Bounds: at most `max_per_uid` tables per uid that is no administrator (RESOURCE_EXHAUSTED past
// it, naming --max-lease-tables-per-uid); each question scans only the tables it must: one
// version's holders, the tables of principals that may read it; a reclaim, only the tables
// that pin something. The questions that only count (Stat, List, Stats) scan a Snapshot after
// the store's lock is released, so a user's tables never hold up anyone else's calls.
//
// Ownership: shares the memfds with the snapshots; a table goes with its session (Close), and
// from then on pins nothing (a snapshot taken before keeps it mapped until it goes). Not
// thread-safe, but for Snapshot::Count: the TensorStore calls it under its lock.
#ifndef TENSORBROKER_DAEMON_STORE_LEASE_SLOT_TABLES_H_
#define TENSORBROKER_DAEMON_STORE_LEASE_SLOT_TABLES_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "daemon/identity/principal.h"
#include "daemon/identity/principal_set.h"
#include "daemon/memory/memfd_segment.h"

namespace tensorbroker::daemon {

// The versions one process may hold through its table at once (its quota of table leases; past
// it the client takes leases from the daemon as before).
inline constexpr uint32_t kLeaseSlotsPerTable = 1024;
// --max-lease-tables-per-uid's default: the processes of one uid with reads without a round
// trip at once (the others read through the daemon).
inline constexpr size_t kDefaultLeaseTablesPerUid = 64;

// Who may read a version (its owner, its readers, an administrator: SpecAllows), copied out of
// its spec so that a snapshot asks without the store's lock.
struct VersionReaders {
  uint32_t owner_uid = 0;
  PrincipalSet readers;
  bool Allow(const Principal& principal) const {
    return principal.admin || owner_uid == principal.uid || readers.Allows(principal);
  }
};

class LeaseSlotTables {
  struct Table;

 public:
  // The tables at one moment, to count slots in without the store's lock. Thread-safe.
  class Snapshot {
   public:
    // How many slots name each token of `wanted`, counting a slot only when its table's
    // principal may read that version (one scan of each table).
    absl::flat_hash_map<uint64_t, uint32_t> Count(
        const absl::flat_hash_map<uint64_t, VersionReaders>& wanted) const;

   private:
    friend class LeaseSlotTables;
    std::vector<std::shared_ptr<const Table>> tables_;
    std::atomic<uint64_t>* scans_ = nullptr;
  };

  using MayRead = absl::FunctionRef<bool(const Principal&)>;
  // The version a slot's `value` pins for a table of `principal`: nullopt when none (no version
  // has that token, or `principal` may not read it).
  using ResolvePin = absl::FunctionRef<std::optional<uint64_t>(const Principal&, uint64_t value)>;

  explicit LeaseSlotTables(size_t max_per_uid = kDefaultLeaseTablesPerUid)
      : max_per_uid_(max_per_uid) {}

  // The table of `session` (made on its first call). RESOURCE_EXHAUSTED when its principal's
  // uid (no administrator) has max_per_uid tables already, or memory cannot hold it.
  absl::StatusOr<const MemfdSegment*> Open(const std::string& session, const Principal& principal);
  // The table of `session`; nullptr when it has none.
  const MemfdSegment* Find(const std::string& session) const;
  // Drops the table of `session`; false when it had none.
  bool Close(const std::string& session);

  // The sessions whose tables name `value`, among the tables of principals that pass
  // `may_read` (one scan of each of those, with sequentially consistent loads while their
  // processes write).
  std::vector<std::string> Holders(uint64_t value, MayRead may_read) const;
  // Every value `session`'s table names now (one scan); empty when it has no table.
  absl::flat_hash_set<uint64_t> ValuesOf(const std::string& session) const;
  // How many slots pin each version, over one scan of every table: what a question about many
  // versions asks (List, Stats, eviction).
  absl::flat_hash_map<uint64_t, uint32_t> Holdings(ResolvePin resolve) const;

  // Every table as it is now, for Snapshot::Count.
  Snapshot Snap() const;

  // Tables scanned since the start (each kLeaseSlotsPerTable loads), under the store's lock or
  // in snapshots: the daemon's cost of keeping lease tables, which tests bound.
  uint64_t table_scans() const { return table_scans_.load(std::memory_order_relaxed); }

  bool empty() const { return tables_.empty(); }
  size_t size() const { return tables_.size(); }

 private:
  struct Table {
    Table(Principal p, MemfdSegment m) : principal(std::move(p)), memfd(std::move(m)) {}
    Principal principal;
    MemfdSegment memfd;
    // The table's count of takes when a scan last found it empty, plus 1 (0: none known); it
    // was formatted empty at count 0. A hint only this daemon writes (LeaseSlots::Take).
    mutable std::atomic<uint64_t> empty_at_plus_one{1};
  };
  // `visit` for each value `table` holds now (sequentially consistent loads, while its process
  // writes); none, with no scan, while its count of takes has not moved since a scan found it
  // empty. Counts the scans it makes in `scans`. Allocates nothing.
  static void Scan(const Table& table, std::atomic<uint64_t>* scans,
                   absl::FunctionRef<void(uint64_t)> visit);
  // Calls `each(session, table)` for the tables of principals passing `may_read`.
  void ScanReadable(MayRead may_read,
                    absl::FunctionRef<void(const std::string&, const Table&)> each) const;

  const size_t max_per_uid_;
  std::map<std::string, std::shared_ptr<const Table>> tables_;  // by session
  std::map<uint32_t, size_t> per_uid_;  // tables of each uid that is no administrator
  mutable std::atomic<uint64_t> table_scans_{0};
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_STORE_LEASE_SLOT_TABLES_H_
