#include "common/lease_slots.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace tensorbroker {
namespace {

// Header words.
constexpr size_t kMagicWord = 0;
constexpr size_t kSlotsWord = 1;
constexpr size_t kTakesWord = 2;

const uint64_t* SlotsOf(const void* base) {
  return reinterpret_cast<const uint64_t*>(static_cast<const uint8_t*>(base) +
                                           kLeaseSlotsHeaderBytes);
}

}  // namespace

size_t LeaseSlotsBytes(uint32_t slots) { return kLeaseSlotsHeaderBytes + size_t{slots} * 8; }

absl::Status LeaseSlots::Format(void* base, size_t bytes, uint32_t slots) {
  if (slots == 0 || LeaseSlotsBytes(slots) > bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("lease slots: ", slots, " slots do not fit ", bytes, " bytes"));
  }
  std::memset(base, 0, LeaseSlotsBytes(slots));
  auto* header = static_cast<uint64_t*>(base);
  __atomic_store_n(&header[kSlotsWord], uint64_t{slots}, __ATOMIC_RELAXED);
  __atomic_store_n(&header[kMagicWord], kLeaseSlotsMagic, __ATOMIC_RELEASE);
  return absl::OkStatus();
}

absl::Status LeaseSlots::Check(const void* base, size_t bytes) {
  if (bytes < kLeaseSlotsHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat("lease slots: ", bytes, " bytes, no header"));
  }
  const auto* header = static_cast<const uint64_t*>(base);
  if (__atomic_load_n(&header[kMagicWord], __ATOMIC_ACQUIRE) != kLeaseSlotsMagic) {
    return absl::InvalidArgumentError("lease slots: not a lease table of this layout (magic)");
  }
  const uint64_t slots = __atomic_load_n(&header[kSlotsWord], __ATOMIC_RELAXED);
  if (slots == 0 || slots > UINT32_MAX || LeaseSlotsBytes(static_cast<uint32_t>(slots)) > bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("lease slots: ", slots, " slots do not fit ", bytes, " bytes"));
  }
  return absl::OkStatus();
}

LeaseSlots::LeaseSlots(void* base)
    : takes_(&static_cast<uint64_t*>(base)[kTakesWord]),
      slots_base_(
          reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(base) + kLeaseSlotsHeaderBytes)),
      slots_(static_cast<uint32_t>(
          __atomic_load_n(&static_cast<const uint64_t*>(base)[kSlotsWord], __ATOMIC_RELAXED))) {}

std::optional<uint32_t> LeaseSlots::Take(uint64_t object) {
  const uint32_t start = __atomic_load_n(&next_, __ATOMIC_RELAXED);
  for (uint32_t i = 0; i < slots_; ++i) {
    const uint32_t slot = (start + i) % slots_;
    uint64_t free = 0;
    if (__atomic_load_n(&slots_base_[slot], __ATOMIC_RELAXED) == 0 &&
        __atomic_compare_exchange_n(&slots_base_[slot], &free, object, false, __ATOMIC_SEQ_CST,
                                    __ATOMIC_RELAXED)) {
      // Counted after the slot is written and before the caller checks the record again
      // (sequentially consistent): a daemon that reads the count unchanged since it saw the
      // table empty may skip it (TakesOf).
      __atomic_fetch_add(takes_, 1, __ATOMIC_SEQ_CST);
      __atomic_store_n(&next_, (slot + 1) % slots_, __ATOMIC_RELAXED);
      return slot;
    }
  }
  return std::nullopt;
}

void LeaseSlots::Give(uint32_t slot) {
  if (slot < slots_) __atomic_store_n(&slots_base_[slot], uint64_t{0}, __ATOMIC_SEQ_CST);
}

std::vector<uint64_t> HeldObjects(const void* base, uint32_t slots) {
  std::vector<uint64_t> held;
  VisitHeld(base, slots, [&](uint64_t object) { held.push_back(object); });
  return held;
}

uint32_t VisitHeld(const void* base, uint32_t slots, absl::FunctionRef<void(uint64_t)> visit) {
  const uint64_t* table = SlotsOf(base);
  uint32_t held = 0;
  for (uint32_t i = 0; i < slots; ++i) {
    const uint64_t object = __atomic_load_n(&table[i], __ATOMIC_SEQ_CST);
    if (object == 0) continue;
    ++held;
    visit(object);
  }
  return held;
}

uint64_t TakesOf(const void* base) {
  return __atomic_load_n(&static_cast<const uint64_t*>(base)[kTakesWord], __ATOMIC_SEQ_CST);
}

bool HoldsObject(const void* base, uint32_t slots, uint64_t object) {
  const uint64_t* table = SlotsOf(base);
  for (uint32_t i = 0; i < slots; ++i) {
    if (__atomic_load_n(&table[i], __ATOMIC_SEQ_CST) == object) return true;
  }
  return false;
}

}  // namespace tensorbroker
