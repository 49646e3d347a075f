#include "common/tensor_layout.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace tensorbroker {
namespace {

bool IsNameByte(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '/' || c == '-';
}

// A printable rendering of untrusted bytes for error messages, cut to a sane length.
std::string Quote(absl::string_view s) {
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < 64; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, "\\x", absl::Hex(c, absl::kZeroPad2));
    }
  }
  if (s.size() > 64) out += "...";
  return out + "'";
}

absl::Status CheckAlphabet(absl::string_view value, absl::string_view field) {
  for (size_t i = 0; i < value.size(); ++i) {
    if (!IsNameByte(value[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, " ", Quote(value), ": byte ", i, " is not one of [A-Za-z0-9._/-]"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateName(absl::string_view name, absl::string_view field) {
  if (name.empty()) return absl::InvalidArgumentError(absl::StrCat(field, " is empty"));
  if (name.size() > kMaxNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat(field, " ", Quote(name), " is ", name.size(),
                                                   " bytes long; at most ", kMaxNameBytes,
                                                   " are allowed"));
  }
  if (absl::Status s = CheckAlphabet(name, field); !s.ok()) return s;
  if (name.front() == '/') {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " ", Quote(name), " must not start with '/'"));
  }
  for (absl::string_view segment : absl::StrSplit(name, '/')) {
    if (segment.empty() || segment == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat(field, " ", Quote(name), " has an empty or '..' path segment"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidatePrefix(absl::string_view prefix, absl::string_view field) {
  if (prefix.size() > kMaxNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " is ", prefix.size(), " bytes long; at most ", kMaxNameBytes));
  }
  return CheckAlphabet(prefix, field);
}

absl::Status ValidateDType(const DLDataType& dtype, absl::string_view field) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " (code=", dtype.code, ", bits=", dtype.bits, ", lanes=", dtype.lanes, ") ", why));
  };
  if (dtype.lanes != 1) return bad("has lanes != 1; only lanes == 1 is supported");
  switch (dtype.code) {
    case kDLInt:
    case kDLUInt:
      if (dtype.bits == 8 || dtype.bits == 16 || dtype.bits == 32 || dtype.bits == 64) break;
      return bad("is not an integer type: bits must be 8, 16, 32 or 64");
    case kDLFloat:
      if (dtype.bits == 16 || dtype.bits == 32 || dtype.bits == 64) break;
      return bad("is not a float type: bits must be 16, 32 or 64");
    case kDLBfloat:
      if (dtype.bits == 16) break;
      return bad("is not bfloat16: bits must be 16");
    case kDLComplex:
      if (dtype.bits == 32 || dtype.bits == 64 || dtype.bits == 128) break;
      return bad("is not a complex type: bits must be 32, 64 or 128");
    case kDLBool:
      if (dtype.bits == 8) break;
      return bad("is not bool: bits must be 8");
    default:
      if (IsFloat8Code(dtype.code)) {
        if (dtype.bits == 8) break;
        return bad("is a float8 type: bits must be 8");
      }
      return bad("has an unknown or unsupported type code");
  }
  return absl::OkStatus();
}

std::vector<int64_t> CompactStrides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t step = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = step;
    step *= shape[i] > 0 ? shape[i] : 1;
  }
  return strides;
}

absl::StatusOr<TensorLayout> ComputeLayout(const std::vector<int64_t>& shape,
                                           const DLDataType& dtype,
                                           const std::vector<int64_t>& strides,
                                           uint64_t buffer_nbytes) {
  if (absl::Status s = ValidateDType(dtype); !s.ok()) return s;
  if (shape.size() > kMaxDims) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape has ", shape.size(), " dimensions; at most ", kMaxDims));
  }
  if (!strides.empty() && strides.size() != shape.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("strides has ", strides.size(), " entries but shape has ", shape.size()));
  }
  const uint64_t item = ItemSize(dtype);
  // Keep every byte count well inside int64 so offsets computed anywhere cannot overflow.
  constexpr uint64_t kLimit = uint64_t{1} << 62;
  // As in NumPy, a dimension of 0 empties the tensor but does not excuse the others: the
  // product of the non-zero dimensions is bounded too, so that compact strides (which count a
  // 0 as 1) cannot overflow either.
  uint64_t elements = 1;
  uint64_t extents = 1;  // the product of the non-zero dimensions
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape[", i, "] = ", shape[i], " is negative"));
    }
    if (shape[i] == 0) {
      elements = 0;
      continue;
    }
    if (extents > kLimit / static_cast<uint64_t>(shape[i])) {
      return absl::InvalidArgumentError(absl::StrCat("shape [", absl::StrJoin(shape, ", "),
                                                     "] has too many elements (overflow)"));
    }
    extents *= static_cast<uint64_t>(shape[i]);
    elements *= static_cast<uint64_t>(shape[i]);
  }
  if (extents > kLimit / item) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape [", absl::StrJoin(shape, ", "), "] is too large in bytes"));
  }
  TensorLayout layout;
  layout.elements = elements;
  layout.strides = strides.empty() ? CompactStrides(shape) : strides;
  // Span in elements: 1 + sum((shape[i] - 1) * stride[i]); zero elements span nothing.
  uint64_t last = 0;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (layout.strides[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("strides[", i, "] = ", layout.strides[i],
                                                     " is negative; the broker stores tensors "
                                                     "with non-negative strides"));
    }
    if (shape[i] == 0) continue;
    const uint64_t extent = static_cast<uint64_t>(shape[i] - 1);
    const uint64_t stride = static_cast<uint64_t>(layout.strides[i]);
    if (stride != 0 && extent > (kLimit / item - last) / stride) {
      return absl::InvalidArgumentError(
          absl::StrCat("strides[", i, "] = ", layout.strides[i], " overflows the buffer size"));
    }
    last += extent * stride;
  }
  const uint64_t span = elements == 0 ? 0 : (last + 1) * item;
  if (buffer_nbytes == 0) {
    layout.nbytes = span;
  } else {
    if (buffer_nbytes > kLimit) {
      return absl::InvalidArgumentError(absl::StrCat("nbytes = ", buffer_nbytes, " is too large"));
    }
    if (span > buffer_nbytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("strides [", absl::StrJoin(layout.strides, ", "), "] reach byte ", span,
                       ", past the end of the ", buffer_nbytes, "-byte buffer (nbytes)"));
    }
    layout.nbytes = buffer_nbytes;
  }
  return layout;
}

}  // namespace tensorbroker
