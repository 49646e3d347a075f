#include "daemon/store/lease_slot_tables.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/lease_slots.h"
#include "daemon/memory/memory_pool.h"

namespace tensorbroker::daemon {
namespace {

constexpr uint64_t kPageBytes = 4096;

}  // namespace

absl::StatusOr<const MemfdSegment*> LeaseSlotTables::Open(const std::string& session,
                                                          const Principal& principal) {
  if (auto it = tables_.find(session); it != tables_.end()) return &it->second.memfd;
  const uint64_t bytes = RoundUp(LeaseSlotsBytes(kLeaseSlotsPerTable), kPageBytes);
  auto memfd =
      MemfdSegment::Create(absl::StrCat("tensorbroker-lease-table-uid", principal.uid), bytes);
  if (!memfd.ok()) return memfd.status();
  if (absl::Status s = LeaseSlots::Format(memfd->data(), bytes, kLeaseSlotsPerTable); !s.ok()) {
    return s;
  }
  auto it = tables_.emplace(session, Table{principal, *std::move(memfd)}).first;
  return &it->second.memfd;
}

const MemfdSegment* LeaseSlotTables::Find(const std::string& session) const {
  auto it = tables_.find(session);
  return it == tables_.end() ? nullptr : &it->second.memfd;
}

bool LeaseSlotTables::Close(const std::string& session) { return tables_.erase(session) > 0; }

bool LeaseSlotTables::AnyHolds(uint64_t object, const MayRead& may_read) const {
  for (const auto& [session, table] : tables_) {
    if (!may_read(table.principal)) continue;
    ++table_scans_;
    if (HoldsObject(table.memfd.data(), kLeaseSlotsPerTable, object)) return true;
  }
  return false;
}

absl::flat_hash_map<uint64_t, uint32_t> LeaseSlotTables::Holdings(
    const MayReadObject& may_read) const {
  absl::flat_hash_map<uint64_t, uint32_t> holdings;
  for (const auto& [session, table] : tables_) {
    ++table_scans_;
    for (uint64_t held : HeldObjects(table.memfd.data(), kLeaseSlotsPerTable)) {
      if (may_read(table.principal, held)) ++holdings[held];
    }
  }
  return holdings;
}

}  // namespace tensorbroker::daemon
