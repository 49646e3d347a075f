#include "client/src/stream_layout.h"

#include <linux/futex.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/tensor_layout.h"

namespace tensorbroker::client_internal {

namespace {

constexpr uint64_t kPage = 4096;

uint64_t RoundUpToPage(uint64_t n) { return (n + kPage - 1) / kPage * kPage; }

absl::Status CheckRange(const char* field, uint64_t value, uint64_t low, uint64_t high) {
  if (value >= low && value <= high) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": ", value, " is out of range [", low, ", ", high, "]"));
}

}  // namespace

absl::Status MakeGeometry(const std::vector<int64_t>& shape, DLDataType dtype, uint32_t slots,
                          uint32_t max_readers, uint32_t frames_per_reader, RingGeometry* out) {
  if (absl::Status s = CheckRange("slots", slots, 2, kMaxSlots); !s.ok()) return s;
  if (absl::Status s = CheckRange("max_readers", max_readers, 1, kMaxReaders); !s.ok()) return s;
  if (absl::Status s = CheckRange("frames_per_reader", frames_per_reader, 1, kMaxFramesPerReader);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckRange("shape's dimensions", shape.size(), 0, kMaxStreamDims); !s.ok()) {
    return s;
  }
  auto layout = ComputeLayout(shape, dtype);
  if (!layout.ok()) return layout.status();
  // Keep the whole ring well inside what a 64-bit size and the daemon can address.
  constexpr uint64_t kMaxFrame = uint64_t{1} << 40;
  if (layout->nbytes > kMaxFrame) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape: a frame of ", layout->nbytes, " bytes is over 1 TiB"));
  }
  RingGeometry g{};
  g.magic = kRingMagic;
  g.slots = slots;
  g.max_readers = max_readers;
  g.frames_per_reader = frames_per_reader;
  g.ndim = static_cast<uint32_t>(shape.size());
  g.frame_nbytes = layout->nbytes;
  g.slot_bytes = RoundUpToPage(std::max<uint64_t>(layout->nbytes, 1));
  g.dtype_code = dtype.code;
  g.dtype_bits = dtype.bits;
  g.dtype_lanes = dtype.lanes;
  for (size_t i = 0; i < shape.size(); ++i) g.shape[i] = shape[i];
  if (getrandom(&g.admission, sizeof(g.admission), 0) != sizeof(g.admission)) {
    return absl::InternalError("getrandom failed: no admission token for the ring");
  }
  *out = g;
  return absl::OkStatus();
}

uint64_t RingBytes(const RingGeometry& geometry) {
  return kDataOffset + uint64_t{geometry.slots} * geometry.slot_bytes;
}

absl::Status CheckGeometry(const RingGeometry& g, uint64_t ring_nbytes) {
  auto bad = [](const std::string& what) {
    return absl::FailedPreconditionError(
        absl::StrCat("not a tensorbroker stream ring this library can read: ", what));
  };
  if (g.magic != kRingMagic) return bad("its first bytes are not the ring's magic");
  if (g.slots < 2 || g.slots > kMaxSlots) return bad(absl::StrCat("slots = ", g.slots));
  if (g.max_readers < 1 || g.max_readers > kMaxReaders) {
    return bad(absl::StrCat("max_readers = ", g.max_readers));
  }
  if (g.frames_per_reader < 1 || g.frames_per_reader > kMaxFramesPerReader) {
    return bad(absl::StrCat("frames_per_reader = ", g.frames_per_reader));
  }
  if (g.ndim > kMaxStreamDims) return bad(absl::StrCat("ndim = ", g.ndim));
  const DLDataType dtype{g.dtype_code, g.dtype_bits, g.dtype_lanes};
  if (!ValidateDType(dtype).ok()) return bad("its dtype is not one DLPack defines");
  auto layout = ComputeLayout(std::vector<int64_t>(g.shape, g.shape + g.ndim), dtype);
  if (!layout.ok() || layout->nbytes != g.frame_nbytes) {
    return bad("its shape and dtype do not span frame_nbytes");
  }
  if (g.slot_bytes % kPage != 0 || g.slot_bytes < g.frame_nbytes || g.slot_bytes == 0) {
    return bad(absl::StrCat("slot_bytes = ", g.slot_bytes));
  }
  // slots <= 256 and slot_bytes within the tensor: no overflow below.
  if (g.slot_bytes > ring_nbytes || RingBytes(g) > ring_nbytes) {
    return bad(absl::StrCat("its slots need more than the ring's ", ring_nbytes, " bytes"));
  }
  return absl::OkStatus();
}

void FutexWait(const uint32_t* word, uint32_t expected, int64_t timeout_ns) {
  timespec relative{};
  timespec* limit = nullptr;
  if (timeout_ns >= 0) {
    relative.tv_sec = timeout_ns / 1000000000;
    relative.tv_nsec = timeout_ns % 1000000000;
    limit = &relative;
  }
  // Shared (no FUTEX_PRIVATE_FLAG): the key is the memfd page, whichever mapping waits on it;
  // a read-only mapping may wait.
  syscall(SYS_futex, word, FUTEX_WAIT, expected, limit, nullptr, 0);
}

void FutexWakeAll(uint32_t* word) {
  syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace tensorbroker::client_internal
