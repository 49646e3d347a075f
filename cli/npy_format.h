// The NumPy .npy file format
// (https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html) as far as the broker's
// dtypes need it: parse a header (versions 1.0, 2.0 and 3.0) and build one (1.0, or 2.0 when the
// header does not fit 1.0's 16-bit length).
//
// Contract: every input is untrusted. Parsing never reads outside the bytes it is given and
// answers INVALID_ARGUMENT with a message naming the offending field and value for anything
// malformed, unsupported (big-endian multi-byte data, object/structured/void/string dtypes) or
// absurd (too many dimensions, a dimension past INT64_MAX, a size past 2^62 bytes: nothing
// wraps, and a zero dimension does not excuse the others, as in NumPy). Pure functions,
// thread-safe.
//
// Descr mapping (little-endian only; '|' or '=' are accepted for one-byte types, '=' also
// for wider ones since this is a little-endian host):
//   bool '|b1'   int8 '|i1'  int16 '<i2'  int32 '<i4'  int64 '<i8'
//   uint8 '|u1'  uint16 '<u2' uint32 '<u4' uint64 '<u8'
//   float16 '<f2' float32 '<f4' float64 '<f8' complex64 '<c8' complex128 '<c16'
// bfloat16 and the float8 types have no NumPy descr: they are written as raw void
// ('|V2' / '|V1'), which reading refuses because it carries no element type.
#ifndef TENSORBROKER_CLI_NPY_FORMAT_H_
#define TENSORBROKER_CLI_NPY_FORMAT_H_

#include <dlpack/dlpack.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tensorbroker::npy {

// Headers larger than this are refused (NumPy itself refuses more than 10000 bytes by default).
inline constexpr uint64_t kMaxHeaderBytes = 1 << 20;

struct NpyHeader {
  int major_version = 1;
  int minor_version = 0;
  std::string descr;           // as written in the file, e.g. "<f4"
  DLDataType dtype{};          // what `descr` means
  bool fortran_order = false;  // data is in column-major order
  std::vector<int64_t> shape;
  uint64_t data_offset = 0;  // bytes from the start of the file to the first data byte
  uint64_t data_nbytes = 0;  // bytes of data the shape and dtype need
};

// Parses the header at the start of `bytes`, which must hold at least the whole header (the
// data may be missing). Checks everything in the header, not that the data is all there.
absl::StatusOr<NpyHeader> ParseHeader(absl::string_view bytes);

// ParseHeader plus a check that `file` (a whole .npy file) holds all the data. Bytes after the
// data are ignored, as NumPy does.
absl::StatusOr<NpyHeader> ParseFile(absl::string_view file);

// The dtype a descr string ('<f4', '|b1', ...) stands for.
absl::StatusOr<DLDataType> DTypeFromDescr(absl::string_view descr);

struct Descr {
  std::string text;       // e.g. "<f4"
  bool raw_void = false;  // true for bfloat16/float8, written as '|V2'/'|V1'
};
// The descr to write for a broker dtype; INVALID_ARGUMENT for dtypes the broker does not know.
absl::StatusOr<Descr> DescrForDType(const DLDataType& dtype);

// The complete header (magic, version, length, dict, padding, '\n') for C-order data of
// `shape` written with `descr`, padded so the data starts at a multiple of 64 bytes. Version
// 1.0 unless the header needs 2.0.
std::string BuildHeader(absl::string_view descr, const std::vector<int64_t>& shape);

// Strides in elements of column-major data of `shape` (dimensions of size 0 count as 1).
std::vector<int64_t> FortranStrides(const std::vector<int64_t>& shape);

}  // namespace tensorbroker::npy

#endif  // TENSORBROKER_CLI_NPY_FORMAT_H_
