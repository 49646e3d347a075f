#include "daemon/store/lease_slot_tables.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/lease_slots.h"
#include "daemon/memory/memory_pool.h"
#include "daemon/store/quota_ledger.h"

namespace tensorbroker::daemon {
namespace {

constexpr uint64_t kPageBytes = 4096;

}  // namespace

absl::StatusOr<const MemfdSegment*> LeaseSlotTables::Open(const std::string& session,
                                                          const Principal& principal) {
  if (auto it = tables_.find(session); it != tables_.end()) return &it->second->memfd;
  if (!principal.admin) {
    if (absl::Status s = CountIn(&per_uid_, principal.uid, max_per_uid_, "lease tables"); !s.ok()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("open_fast_reads: ", s.message(), " (--max-lease-tables-per-uid ",
                       max_per_uid_, "); this client reads through the daemon"));
    }
  }
  const uint64_t bytes = RoundUp(LeaseSlotsBytes(kLeaseSlotsPerTable), kPageBytes);
  absl::StatusOr<MemfdSegment> memfd =
      MemfdSegment::Create(absl::StrCat("tensorbroker-lease-table-uid", principal.uid), bytes);
  absl::Status formatted = memfd.status();
  if (memfd.ok()) formatted = LeaseSlots::Format(memfd->data(), bytes, kLeaseSlotsPerTable);
  if (!formatted.ok()) {
    if (!principal.admin) CountOff(&per_uid_, principal.uid);
    return formatted;
  }
  auto table = std::make_shared<const Table>(principal, *std::move(memfd));
  const MemfdSegment* made = &table->memfd;
  tables_.emplace(session, std::move(table));
  return made;
}

const MemfdSegment* LeaseSlotTables::Find(const std::string& session) const {
  auto it = tables_.find(session);
  return it == tables_.end() ? nullptr : &it->second->memfd;
}

bool LeaseSlotTables::Close(const std::string& session) {
  auto it = tables_.find(session);
  if (it == tables_.end()) return false;
  if (!it->second->principal.admin) CountOff(&per_uid_, it->second->principal.uid);
  tables_.erase(it);
  return true;
}

void LeaseSlotTables::Scan(const Table& table, std::atomic<uint64_t>* scans,
                           absl::FunctionRef<void(uint64_t)> visit) {
  const uint64_t takes = TakesOf(table.memfd.data());  // before the slots
  if (takes + 1 == table.empty_at_plus_one.load(std::memory_order_relaxed)) return;
  scans->fetch_add(1, std::memory_order_relaxed);
  if (VisitHeld(table.memfd.data(), kLeaseSlotsPerTable, visit) == 0) {
    table.empty_at_plus_one.store(takes + 1, std::memory_order_relaxed);
  }
}

void LeaseSlotTables::ScanReadable(
    MayRead may_read, absl::FunctionRef<void(const std::string&, const Table&)> each) const {
  for (const auto& [session, table] : tables_) {
    if (may_read(table->principal)) each(session, *table);
  }
}

std::vector<std::string> LeaseSlotTables::Holders(uint64_t value, MayRead may_read) const {
  std::vector<std::string> holders;
  ScanReadable(may_read, [&](const std::string& session, const Table& table) {
    bool holds = false;
    Scan(table, &table_scans_, [&](uint64_t held) { holds = holds || held == value; });
    if (holds) holders.push_back(session);
  });
  return holders;
}

absl::flat_hash_set<uint64_t> LeaseSlotTables::ValuesOf(const std::string& session) const {
  absl::flat_hash_set<uint64_t> values;
  auto it = tables_.find(session);
  if (it == tables_.end()) return values;
  Scan(*it->second, &table_scans_, [&](uint64_t held) { values.insert(held); });
  return values;
}

absl::flat_hash_map<uint64_t, uint32_t> LeaseSlotTables::Holdings(ResolvePin resolve) const {
  absl::flat_hash_map<uint64_t, uint32_t> holdings;
  ScanReadable([](const Principal&) { return true; },
               [&](const std::string&, const Table& table) {
                 Scan(table, &table_scans_, [&](uint64_t held) {
                   if (std::optional<uint64_t> object = resolve(table.principal, held)) {
                     ++holdings[*object];
                   }
                 });
               });
  return holdings;
}

LeaseSlotTables::Snapshot LeaseSlotTables::Snap() const {
  Snapshot snapshot;
  snapshot.tables_.reserve(tables_.size());
  for (const auto& [session, table] : tables_) snapshot.tables_.push_back(table);
  snapshot.scans_ = &table_scans_;
  return snapshot;
}

absl::flat_hash_map<uint64_t, uint32_t> LeaseSlotTables::Snapshot::Count(
    const absl::flat_hash_map<uint64_t, VersionReaders>& wanted) const {
  absl::flat_hash_map<uint64_t, uint32_t> counts;
  if (wanted.empty()) return counts;
  for (const std::shared_ptr<const Table>& table : tables_) {
    Scan(*table, scans_, [&](uint64_t held) {
      auto it = wanted.find(held);
      if (it != wanted.end() && it->second.Allow(table->principal)) ++counts[held];
    });
  }
  return counts;
}

}  // namespace tensorbroker::daemon
