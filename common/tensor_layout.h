// Validation of everything that describes a tensor (name, dtype, shape, strides) and the byte
// layout that follows from it. Shared by the daemon, which must treat every request as
// untrusted, and the client, which checks early to give the same messages without a round trip.
//
// All functions are pure and thread-safe. Errors are INVALID_ARGUMENT with a message that names
// the field and the offending value.
#ifndef TENSORBROKER_COMMON_TENSOR_LAYOUT_H_
#define TENSORBROKER_COMMON_TENSOR_LAYOUT_H_

#include <dlpack/dlpack.h>

#include <cstdint>
#include <string>
#include <vector>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tensorbroker {

inline constexpr size_t kMaxNameBytes = 255;
inline constexpr size_t kMaxDims = 32;
// Every tensor's data pointer is aligned to this many bytes (DLPack's recommendation).
inline constexpr uint64_t kDataAlignment = 256;

// DLPack 1.1 type codes 7..14 (kDLFloat8_e3m4 .. kDLFloat8_e8m0fnu). Spelled as numbers because
// the DLPack 1.0 header Debian ships predates them.
inline constexpr uint8_t kFloat8FirstCode = 7;
inline constexpr uint8_t kFloat8LastCode = 14;
inline constexpr bool IsFloat8Code(uint8_t code) {
  return code >= kFloat8FirstCode && code <= kFloat8LastCode;
}

// 1-255 bytes of [A-Za-z0-9._/-], no leading '/', no empty or ".." path segment.
absl::Status ValidateName(absl::string_view name, absl::string_view field = "name");
// A prefix for List: empty, or the same alphabet as a name (a partial segment is fine).
absl::Status ValidatePrefix(absl::string_view prefix, absl::string_view field = "prefix");

// lanes == 1 and a (code, bits) pair DLPack defines with whole bytes.
absl::Status ValidateDType(const DLDataType& dtype, absl::string_view field = "dtype");

struct TensorLayout {
  std::vector<int64_t> strides;  // in elements, always filled in
  uint64_t nbytes = 0;           // bytes the buffer must have
  uint64_t elements = 0;
};

// Checks shape and (optional) strides and computes the buffer size. As in NumPy, the non-zero
// dimensions must stay within 2^62 bytes even when another dimension is 0. Strides must be
// non-negative; with `buffer_nbytes` > 0 every element must lie inside that many bytes and the
// buffer is that large, otherwise it is exactly as large as the elements span.
absl::StatusOr<TensorLayout> ComputeLayout(const std::vector<int64_t>& shape,
                                           const DLDataType& dtype,
                                           const std::vector<int64_t>& strides = {},
                                           uint64_t buffer_nbytes = 0);

// Compact C-order strides for `shape`.
std::vector<int64_t> CompactStrides(const std::vector<int64_t>& shape);

// Bytes per element; dtype must be valid.
inline uint64_t ItemSize(const DLDataType& dtype) { return (uint64_t{dtype.bits} + 7) / 8; }

}  // namespace tensorbroker

#endif  // TENSORBROKER_COMMON_TENSOR_LAYOUT_H_
