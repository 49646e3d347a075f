// Reading a .npy file as a DLTensor and writing a DLTensor as a .npy file.
//
// NpyArray::Load validates the whole file (see npy_format.h) and exposes its data, without a
// copy for regular files (the file is mmap'ed), as a CPU DLTensor whose strides describe the
// file's layout (C or Fortran order). WriteNpy reads any CPU-addressable tensor through its
// strides and writes it in C order. Errors are absl::Status values naming the file.
// Not thread-safe; one owner each.
#ifndef TENSORBROKER_CLI_NPY_FILE_H_
#define TENSORBROKER_CLI_NPY_FILE_H_

#include <dlpack/dlpack.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cli/npy_format.h"
#include "cli/posix_file.h"

namespace tensorbroker::npy {

class NpyArray {
 public:
  // Loads `path` ("-": standard input). INVALID_ARGUMENT, prefixed with the path, for any
  // malformed or unsupported content.
  static absl::StatusOr<NpyArray> Load(const std::string& path);

  const NpyHeader& header() const { return header_; }
  // A CPU tensor viewing the file's data; valid while this object lives and is not moved.
  // The data pointer is the start of the file and byte_offset the header's length.
  DLTensor tensor();

 private:
  NpyArray() = default;
  cli::InputFile file_;
  NpyHeader header_;
  std::vector<int64_t> strides_;
};

// Receives the bytes of the file being written, in order.
using ByteSink = absl::FunctionRef<absl::Status(absl::string_view)>;

// Writes header and data of `tensor` (host-readable memory; strides in elements, non-negative,
// or null for compact) with element type `descr` (see DescrForDType) in C order.
absl::Status WriteNpy(const DLTensor& tensor, absl::string_view descr, ByteSink sink);

}  // namespace tensorbroker::npy

#endif  // TENSORBROKER_CLI_NPY_FILE_H_
