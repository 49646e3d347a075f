#include "cli/npy_file.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/tensor_layout.h"

namespace tensorbroker::npy {
namespace {

constexpr size_t kFlushBytes = size_t{4} << 20;

}  // namespace

absl::StatusOr<NpyArray> NpyArray::Load(const std::string& path) {
  absl::StatusOr<cli::InputFile> file = cli::InputFile::Open(path);
  if (!file.ok()) return file.status();
  absl::StatusOr<NpyHeader> header = ParseFile(file->bytes());
  if (!header.ok()) {
    return absl::Status(header.status().code(), absl::StrCat(path == "-" ? "<stdin>" : path, ": ",
                                                             header.status().message()));
  }
  NpyArray array;
  array.file_ = *std::move(file);
  array.header_ = *std::move(header);
  array.strides_ = array.header_.fortran_order ? FortranStrides(array.header_.shape)
                                               : CompactStrides(array.header_.shape);
  return array;
}

DLTensor NpyArray::tensor() {
  DLTensor t{};
  t.data = const_cast<char*>(file_.bytes().data());
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = static_cast<int32_t>(header_.shape.size());
  t.dtype = header_.dtype;
  t.shape = header_.shape.data();
  t.strides = strides_.data();
  t.byte_offset = header_.data_offset;
  return t;
}

absl::Status WriteNpy(const DLTensor& tensor, absl::string_view descr, ByteSink sink) {
  if (tensor.ndim < 0 || static_cast<size_t>(tensor.ndim) > kMaxDims) {
    return absl::InvalidArgumentError(absl::StrCat("tensor has ", tensor.ndim, " dimensions"));
  }
  const size_t ndim = static_cast<size_t>(tensor.ndim);
  std::vector<int64_t> shape(tensor.shape, tensor.shape + ndim);
  std::vector<int64_t> strides = tensor.strides != nullptr
                                     ? std::vector<int64_t>(tensor.strides, tensor.strides + ndim)
                                     : CompactStrides(shape);
  absl::StatusOr<TensorLayout> layout = ComputeLayout(shape, tensor.dtype, strides);
  if (!layout.ok()) return layout.status();

  if (absl::Status s = sink(BuildHeader(descr, shape)); !s.ok()) return s;
  if (layout->elements == 0) return absl::OkStatus();

  const uint64_t item = ItemSize(tensor.dtype);
  const char* base = static_cast<const char*>(tensor.data) + tensor.byte_offset;
  // The innermost dimensions that are already C-contiguous are copied as one run.
  size_t outer = ndim;
  uint64_t run = 1;
  while (outer > 0 && (shape[outer - 1] == 1 || static_cast<uint64_t>(strides[outer - 1]) == run)) {
    run *= static_cast<uint64_t>(shape[outer - 1]);
    --outer;
  }
  const size_t run_bytes = static_cast<size_t>(run * item);
  if (outer == 0) return sink(absl::string_view(base, run_bytes));

  std::vector<int64_t> index(outer, 0);
  std::string buffer;
  buffer.reserve(run_bytes < kFlushBytes ? kFlushBytes + run_bytes : 0);
  while (true) {
    int64_t offset = 0;
    for (size_t i = 0; i < outer; ++i) offset += index[i] * strides[i];
    const char* src = base + static_cast<uint64_t>(offset) * item;
    if (run_bytes >= kFlushBytes) {
      if (!buffer.empty()) {
        if (absl::Status s = sink(buffer); !s.ok()) return s;
        buffer.clear();
      }
      if (absl::Status s = sink(absl::string_view(src, run_bytes)); !s.ok()) return s;
    } else {
      buffer.append(src, run_bytes);
      if (buffer.size() >= kFlushBytes) {
        if (absl::Status s = sink(buffer); !s.ok()) return s;
        buffer.clear();
      }
    }
    size_t d = outer;
    while (d > 0) {
      --d;
      if (++index[d] < shape[d]) break;
      index[d] = 0;
      if (d == 0) {
        if (!buffer.empty()) return sink(buffer);
        return absl::OkStatus();
      }
    }
  }
}

}  // namespace tensorbroker::npy
