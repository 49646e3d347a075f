// A process's lease table (issue 34; docs/architecture.md, "Reads without a round trip: the
// protocol"): slots in which the process writes the versions it holds without asking the daemon
// (the daemon's object id of each), and which the daemon scans before it frees a version. The
// daemon makes and formats the memfd and hands it to that one process read-write; the process
// writes the slots, the daemon only reads them. Layout: a 64-byte header (magic, slot count,
// takes: how many slots the process has taken so far), then `slots` 8-byte slots, 0 meaning
// free.
//
// A slot is taken with a sequentially consistent compare-and-swap and the daemon loads slots
// sequentially consistently: with the directory's sequence (common/directory_records.h) that is
// the store-buffer pattern the protocol rests on. A take then counts itself in the header
// (sequentially consistent, before its caller reads the record again): a take whose count the
// daemon cannot see yet will see the record moved and give its slot back, so a table the daemon
// scanned empty and whose count has not moved since holds no version it may free; the daemon
// skips it. Everything the daemon reads here is only data from another process: it checks each
// value against what that process may read, and a count the process forges only makes the
// daemon skip or scan that process's own table.
//
// Threading: any thread of the process may Take and Give (lock-free); the daemon scans while
// they run.
#ifndef TENSORBROKER_COMMON_LEASE_SLOTS_H_
#define TENSORBROKER_COMMON_LEASE_SLOTS_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"

namespace tensorbroker {

inline constexpr uint64_t kLeaseSlotsMagic = 0x31534c5342425454ull;  // "TTBBSLS1"
inline constexpr size_t kLeaseSlotsHeaderBytes = 64;

// The bytes of a table of `slots` slots.
size_t LeaseSlotsBytes(uint32_t slots);

// The process's side.
class LeaseSlots {
 public:
  // Lays out an empty table (the daemon, on its mapping); INVALID_ARGUMENT when it does not fit.
  static absl::Status Format(void* base, size_t bytes, uint32_t slots);
  // Checks a mapping of `bytes` bytes before any use.
  static absl::Status Check(const void* base, size_t bytes);
  explicit LeaseSlots(void* base);  // after Check

  // Writes `object` (!= 0) into a free slot and counts the take; nullopt when every slot is
  // taken.
  std::optional<uint32_t> Take(uint64_t object);
  // Frees slot `slot` (one Take returned).
  void Give(uint32_t slot);
  uint32_t slots() const { return slots_; }

 private:
  uint64_t* takes_;
  uint64_t* slots_base_;
  uint32_t slots_;
  uint32_t next_ = 0;  // where the next Take starts looking (a hint; races are harmless)
};

// The daemon's side, over its own mapping of a table it formatted with `slots` slots.
// Every nonzero slot, in slot order (sequentially consistent loads, one slot at a time).
std::vector<uint64_t> HeldObjects(const void* base, uint32_t slots);
// The same without a copy: `visit` for each nonzero slot, in slot order; returns how many.
uint32_t VisitHeld(const void* base, uint32_t slots, absl::FunctionRef<void(uint64_t)> visit);
// Whether some slot holds `object`.
bool HoldsObject(const void* base, uint32_t slots, uint64_t object);
// The table's count of takes (sequentially consistent): read before a scan, so that a table
// scanned empty at count N needs no scan while its count is still N.
uint64_t TakesOf(const void* base);

}  // namespace tensorbroker

#endif  // TENSORBROKER_COMMON_LEASE_SLOTS_H_
