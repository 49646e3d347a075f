// The shared-memory layout of a stream ring (tensorbroker/stream.h) and the checks a reader
// makes of it. A ring is one broker tensor (uint8, published under the stream's name):
//
//   page 0, the control block, written only by the writer:
//     [0, 128)     RingGeometry: what the writer fixed at Open (copied and checked by readers)
//     [128, 192)   head (u64: sequence << 16 | slot), gen (u32, the futex word), state (u32)
//     [192, 704)   accepted[64]: the seat version each reader seat was accepted as (0: free)
//     [768, 2816)  slot_seq[256]: the sequence each slot holds (0: none, kBusy: being refilled)
//   then `slots` slots of `slot_bytes` each from kDataOffset, one frame each.
//
// A reader's seat is a small mutable broker tensor it creates (ephemeral: it goes with the
// reader's session) under SeatPrefix(name) (common/stream_seats.h: a name drawn at random; the
// daemon lets only processes that may read the ring create there, and only ephemeral tensors);
// only the reader writes it, and the writer reads it:
//     magic (u64), admission (u64: the ring's, proving the reader could read the ring),
//     claims[kMaxFramesPerReader] (u64 sequences the reader holds; 0: none),
//     closed (u32: the reader let go of everything and will claim nothing more).
//
// Claims and reuse follow the store-buffer (Dekker) pattern, every access sequentially
// consistent (so no store is reordered after a later load): a reader stores its claim, then
// checks that the slot still holds that sequence; the writer stores kBusy into a slot, then
// scans every accepted seat for a claim of the slot's old sequence. One of the two sees the
// other, so no slot a reader holds is ever refilled. Every value read from another
// process is only data: indexes are checked against the geometry before use.
//
// Threading: plain functions over mappings; the atomics are GCC/Clang __atomic builtins on the
// shared words (address-free, lock-free 32/64-bit).
#ifndef TENSORBROKER_CLIENT_SRC_STREAM_LAYOUT_H_
#define TENSORBROKER_CLIENT_SRC_STREAM_LAYOUT_H_

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/stream_seats.h"

namespace tensorbroker::client_internal {

// Layout 2 (with the admission token); readers and writers of other layouts refuse each other.
inline constexpr uint64_t kRingMagic = 0x32304e4952425454ull;  // "TTBRIN02"
inline constexpr uint64_t kSeatMagic = 0x3230544145534254ull;  // "TBSEAT02"
inline constexpr uint32_t kMaxSlots = 256;
inline constexpr uint32_t kMaxReaders = 64;
inline constexpr uint32_t kMaxFramesPerReader = 16;
inline constexpr uint32_t kMaxStreamDims = 8;
inline constexpr uint64_t kDataOffset = 4096;  // slot 0 starts on the second page
inline constexpr uint64_t kBusy = ~0ull;       // slot_seq of a slot the writer is refilling
inline constexpr uint64_t kSeatBytes = 256;
inline constexpr uint32_t kStreamOpen = 0;
inline constexpr uint32_t kStreamClosed = 1;

// What the writer fixes at Open; the first 128 bytes of the ring.
struct RingGeometry {
  uint64_t magic;
  uint32_t slots;
  uint32_t max_readers;
  uint32_t frames_per_reader;
  uint32_t ndim;
  uint64_t slot_bytes;    // a multiple of 4096, >= frame_nbytes
  uint64_t frame_nbytes;  // what shape and dtype span, compact C order
  uint8_t dtype_code;
  uint8_t dtype_bits;
  uint16_t dtype_lanes;
  uint32_t reserved;
  int64_t shape[kMaxStreamDims];
  // Random, drawn at Open. A reader copies it into its seat: only a process that may read the
  // ring can take a seat (anyone else may create a tensor under the seat prefix, not know this).
  uint64_t admission;
};
static_assert(sizeof(RingGeometry) <= 128, "the geometry fits its 128 bytes");

struct RingControl {
  RingGeometry geometry;
  uint8_t pad0[128 - sizeof(RingGeometry)];
  uint64_t head;   // sequence << 16 | slot; 0 before the first frame
  uint32_t gen;    // bumped at every publication and at close: readers FUTEX_WAIT on it
  uint32_t state;  // kStreamOpen / kStreamClosed
  uint8_t pad1[48];
  uint64_t accepted[kMaxReaders];
  uint8_t pad2[64];
  uint64_t slot_seq[kMaxSlots];
};
static_assert(offsetof(RingControl, head) == 128, "layout");
static_assert(offsetof(RingControl, accepted) == 192, "layout");
static_assert(offsetof(RingControl, slot_seq) == 768, "layout");
static_assert(sizeof(RingControl) <= kDataOffset, "the control block fits page 0");

struct SeatPage {
  uint64_t magic;
  uint64_t admission;  // RingGeometry::admission of the ring it joins
  uint64_t claims[kMaxFramesPerReader];
  uint32_t closed;
};
static_assert(sizeof(SeatPage) <= kSeatBytes, "a seat fits its tensor");

inline uint64_t PackHead(uint64_t sequence, uint32_t slot) { return sequence << 16 | slot; }
inline uint64_t HeadSequence(uint64_t head) { return head >> 16; }
inline uint32_t HeadSlot(uint64_t head) { return static_cast<uint32_t>(head & 0xffff); }

// Checks the geometry a writer asks for and fills in `out` (slot_bytes, frame_nbytes, shape).
// INVALID_ARGUMENT naming the option that is out of range.
absl::Status MakeGeometry(const std::vector<int64_t>& shape, DLDataType dtype, uint32_t slots,
                          uint32_t max_readers, uint32_t frames_per_reader, RingGeometry* out);
// The ring's whole size in bytes for `geometry` (control page + slots).
uint64_t RingBytes(const RingGeometry& geometry);
// A reader's check of a geometry copied out of a ring of `ring_nbytes` bytes (which another
// process wrote): FAILED_PRECONDITION saying what is wrong when it is not a ring this library
// can read safely.
absl::Status CheckGeometry(const RingGeometry& geometry, uint64_t ring_nbytes);

// Atomic access to shared words.
inline uint64_t LoadAcquire(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
inline uint32_t LoadAcquire(const uint32_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
inline void StoreRelease(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
inline void StoreRelease(uint32_t* p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
inline uint64_t LoadSeqCst(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
inline void StoreSeqCst(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_SEQ_CST); }

// FUTEX_WAIT on a (possibly read-only) shared mapping while *word == expected, for at most
// `timeout_ns` (< 0: no limit). Returns when woken, when the word differs, on a signal, or at
// the timeout: callers re-check their condition.
void FutexWait(const uint32_t* word, uint32_t expected, int64_t timeout_ns);
// Wakes every waiter on `word` (shared, not process-private).
void FutexWakeAll(uint32_t* word);

}  // namespace tensorbroker::client_internal

#endif  // TENSORBROKER_CLIENT_SRC_STREAM_LAYOUT_H_
