// NumPy spellings of DLPack dtypes ("float32", "bool", "bfloat16", "float8_e4m3fn", ...) and
// short device names ("cpu", "cuda:0"): the spellings of the CLI, .npy files, the Python package
// and the client's error messages. Part of libtensorbroker_client. Pure functions, thread-safe.
#ifndef TENSORBROKER_DTYPE_NAMES_H_
#define TENSORBROKER_DTYPE_NAMES_H_

#include <dlpack/dlpack.h>

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tensorbroker/export.h"

namespace tensorbroker {

// The NumPy name of a valid dtype; "dtype(code=C,bits=B,lanes=L)" for anything else.
TENSORBROKER_EXPORT std::string DTypeName(const DLDataType& dtype);
// "cpu", "cuda:N", "cuda_host", or "device(type=T,id=I)" for any other device.
TENSORBROKER_EXPORT std::string DeviceName(const DLDevice& device);

// "cpu", "cuda" (= "cuda:0") or "cuda:N" (N >= 0) as a device; INVALID_ARGUMENT naming `field`
// otherwise.
TENSORBROKER_EXPORT absl::StatusOr<DLDevice> ParseDeviceName(absl::string_view name,
                                                             absl::string_view field = "device");

// Inverse of DTypeName for the names it produces; INVALID_ARGUMENT otherwise.
TENSORBROKER_EXPORT absl::StatusOr<DLDataType> ParseDTypeName(absl::string_view name);

}  // namespace tensorbroker

#endif  // TENSORBROKER_DTYPE_NAMES_H_
