// Feeds: the bytes as a whole .npy file to npy::NpyArray::Load (cli/npy_file.h), through a
// memfd's /proc/self/fd path, as `tensorbroker put NAME FILE.npy` loads a file (ParseFile, then
// the strides of its C or Fortran order).
// Asserts, where it loads: the data lies inside the file (data_offset + data_nbytes <= size);
// the tensor the CLI would send passes ComputeLayout (the client's and daemon's check) and
// spans exactly data_nbytes; and WriteNpy (what `tensorbroker get` writes) turns it back into a
// .npy file that parses to the same shape and dtype in C order, with the same data when the
// file was in C order.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "cli/npy_file.h"
#include "cli/npy_format.h"
#include "common/tensor_layout.h"
#include "common/unique_fd.h"
#include "tests/fuzz/fuzz_support.h"

namespace tensorbroker::npy {
namespace {

// The file the CLI is given: one memfd, rewritten for every input.
const std::string& FilePath(int* fd_out) {
  static const int fd = ::memfd_create("npy-file-fuzz", MFD_CLOEXEC);
  static const std::string path = absl::StrCat("/proc/self/fd/", fd);
  *fd_out = fd;
  return path;
}

void CheckArray(NpyArray& array, size_t file_size, absl::string_view file) {
  const NpyHeader& header = array.header();
  FUZZ_CHECK(
      header.data_offset <= file_size && header.data_nbytes <= file_size - header.data_offset,
      "data [%llu, +%llu) past the file's %zu bytes",
      static_cast<unsigned long long>(header.data_offset),
      static_cast<unsigned long long>(header.data_nbytes), file_size);
  const DLTensor tensor = array.tensor();
  const std::vector<int64_t> strides(tensor.strides, tensor.strides + tensor.ndim);
  auto layout = ComputeLayout(header.shape, header.dtype, strides);
  FUZZ_CHECK(layout.ok(), "ComputeLayout refused a loaded file: %s",
             std::string(layout.status().message()).c_str());
  FUZZ_CHECK(layout->nbytes == header.data_nbytes, "layout spans %llu bytes, header says %llu",
             static_cast<unsigned long long>(layout->nbytes),
             static_cast<unsigned long long>(header.data_nbytes));

  std::string written;
  absl::Status status = WriteNpy(tensor, header.descr, [&](absl::string_view bytes) {
    written.append(bytes.data(), bytes.size());
    return absl::OkStatus();
  });
  FUZZ_CHECK(status.ok(), "WriteNpy failed: %s", std::string(status.message()).c_str());
  auto again = ParseFile(written);
  FUZZ_CHECK(again.ok(), "WriteNpy's file does not parse: %s",
             std::string(again.status().message()).c_str());
  FUZZ_CHECK(again->shape == header.shape && again->dtype.code == header.dtype.code &&
                 again->dtype.bits == header.dtype.bits && !again->fortran_order &&
                 again->data_nbytes == header.data_nbytes &&
                 written.size() == again->data_offset + again->data_nbytes,
             "WriteNpy changed the tensor");
  if (!header.fortran_order) {
    FUZZ_CHECK(file.substr(header.data_offset, header.data_nbytes) ==
                   absl::string_view(written).substr(again->data_offset),
               "C-order data changed on the way through WriteNpy");
  }
}

}  // namespace
}  // namespace tensorbroker::npy

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int fd = -1;
  const std::string& path = tensorbroker::npy::FilePath(&fd);
  FUZZ_CHECK(fd >= 0, "memfd_create failed");
  FUZZ_CHECK(::ftruncate(fd, 0) == 0 && ::pwrite(fd, data, size, 0) == static_cast<ssize_t>(size),
             "cannot write the file");
  auto array = tensorbroker::npy::NpyArray::Load(path);
  if (array.ok()) {
    tensorbroker::npy::CheckArray(*array, size,
                                  absl::string_view(reinterpret_cast<const char*>(data), size));
  }
  return 0;
}
