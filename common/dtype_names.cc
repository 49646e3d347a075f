#include "tensorbroker/dtype_names.h"

#include <array>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/tensor_layout.h"

namespace tensorbroker {
namespace {

struct NamedDType {
  absl::string_view name;
  DLDataType dtype;
};

constexpr std::array<NamedDType, 24> kNamedDTypes{{
    {"bool", {kDLBool, 8, 1}},
    {"int8", {kDLInt, 8, 1}},
    {"int16", {kDLInt, 16, 1}},
    {"int32", {kDLInt, 32, 1}},
    {"int64", {kDLInt, 64, 1}},
    {"uint8", {kDLUInt, 8, 1}},
    {"uint16", {kDLUInt, 16, 1}},
    {"uint32", {kDLUInt, 32, 1}},
    {"uint64", {kDLUInt, 64, 1}},
    {"float16", {kDLFloat, 16, 1}},
    {"float32", {kDLFloat, 32, 1}},
    {"float64", {kDLFloat, 64, 1}},
    {"bfloat16", {kDLBfloat, 16, 1}},
    {"complex32", {kDLComplex, 32, 1}},  // torch.complex32 (no NumPy equivalent)
    {"complex64", {kDLComplex, 64, 1}},
    {"complex128", {kDLComplex, 128, 1}},
    // DLPack 1.1 float8 codes 7..14, named as ml_dtypes names them for NumPy.
    {"float8_e3m4", {7, 8, 1}},
    {"float8_e4m3", {8, 8, 1}},
    {"float8_e4m3b11fnuz", {9, 8, 1}},
    {"float8_e4m3fn", {10, 8, 1}},
    {"float8_e4m3fnuz", {11, 8, 1}},
    {"float8_e5m2", {12, 8, 1}},
    {"float8_e5m2fnuz", {13, 8, 1}},
    {"float8_e8m0fnu", {14, 8, 1}},
}};

bool SameDType(const DLDataType& a, const DLDataType& b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

}  // namespace

std::string DTypeName(const DLDataType& dtype) {
  for (const NamedDType& named : kNamedDTypes) {
    if (SameDType(named.dtype, dtype)) return std::string(named.name);
  }
  return absl::StrCat("dtype(code=", dtype.code, ",bits=", dtype.bits, ",lanes=", dtype.lanes, ")");
}

absl::StatusOr<DLDataType> ParseDTypeName(absl::string_view name) {
  for (const NamedDType& named : kNamedDTypes) {
    if (named.name == name) return named.dtype;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("dtype '", name.substr(0, 64),
                   "' is not a dtype the broker knows "
                   "(e.g. float32, int64, bool, bfloat16, complex64, float8_e4m3fn)"));
}

std::string DeviceName(const DLDevice& device) {
  switch (device.device_type) {
    case kDLCPU:
      return "cpu";
    case kDLCUDA:
      return absl::StrCat("cuda:", device.device_id);
    case kDLCUDAHost:
      return "cuda_host";
    default:
      return absl::StrCat("device(type=", static_cast<int>(device.device_type),
                          ",id=", device.device_id, ")");
  }
}

absl::StatusOr<DLDevice> ParseDeviceName(absl::string_view name, absl::string_view field) {
  if (name == "cpu") return DLDevice{kDLCPU, 0};
  if (name == "cuda") return DLDevice{kDLCUDA, 0};
  int ordinal = -1;
  if (absl::StartsWith(name, "cuda:") && absl::SimpleAtoi(name.substr(5), &ordinal) &&
      ordinal >= 0) {
    return DLDevice{kDLCUDA, ordinal};
  }
  return absl::InvalidArgumentError(
      absl::StrCat(field, " '", name.substr(0, 64), "': expected 'cpu', 'cuda' or 'cuda:N'"));
}

}  // namespace tensorbroker
