#include "common/strided_copy.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/tensor_layout.h"

namespace tensorbroker {

void ForEachRowBatch(const DLTensor& src, const RowBatchVisitor& visit) {
  const int64_t item = static_cast<int64_t>(ItemSize(src.dtype));
  const int ndim = src.ndim;
  int64_t elements = 1;
  for (int i = 0; i < ndim; ++i) elements *= src.shape[i];
  if (elements == 0) return;
  if (src.strides == nullptr) {
    visit(0, elements * item, 1, 0);
    return;
  }
  // Merge the innermost dimensions that are already laid out compactly into one run.
  int outer = ndim;  // dims [outer, ndim) form one contiguous run
  int64_t run_elements = 1;
  while (outer > 0) {
    const int d = outer - 1;
    if (src.shape[d] != 1 && src.strides[d] != run_elements) break;
    run_elements *= src.shape[d];
    --outer;
  }
  const int64_t run_bytes = run_elements * item;
  if (outer == 0) {
    visit(0, run_bytes, 1, 0);
    return;
  }
  // The innermost outer dimension becomes the rows of a batch; an odometer walks the rest.
  const int row_dim = outer - 1;
  const int64_t rows = src.shape[row_dim];
  const int64_t pitch = src.strides[row_dim] * item;
  std::vector<int64_t> index(static_cast<size_t>(row_dim), 0);
  int64_t offset = 0;  // in elements, of the current batch's first element
  const int64_t batches = elements / run_elements / rows;
  for (int64_t b = 0; b < batches; ++b) {
    visit(offset * item, run_bytes, rows, pitch);
    for (int d = row_dim - 1; d >= 0; --d) {
      if (++index[static_cast<size_t>(d)] < src.shape[d]) {
        offset += src.strides[d];
        break;
      }
      offset -= src.strides[d] * (src.shape[d] - 1);
      index[static_cast<size_t>(d)] = 0;
    }
  }
}

void CopyToCompact(const DLTensor& src, uint8_t* dst) {
  const uint8_t* base = static_cast<const uint8_t*>(src.data) + src.byte_offset;
  ForEachRowBatch(src, [&](int64_t offset, int64_t run_bytes, int64_t rows, int64_t pitch) {
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(dst, base + offset + r * pitch, static_cast<size_t>(run_bytes));
      dst += run_bytes;
    }
  });
}

bool StreamCompact(const DLTensor& src, size_t max_chunk,
                   const std::function<bool(const uint8_t* data, size_t size)>& sink) {
  const uint64_t item = ItemSize(src.dtype);
  const int ndim = src.ndim;
  std::vector<int64_t> shape(src.shape, src.shape + ndim);
  std::vector<int64_t> strides = src.strides == nullptr
                                     ? CompactStrides(shape)
                                     : std::vector<int64_t>(src.strides, src.strides + ndim);
  uint64_t elements = 1;
  for (int64_t d : shape) elements *= static_cast<uint64_t>(d);
  const uint8_t* base = static_cast<const uint8_t*>(src.data) + src.byte_offset;
  if (elements == 0) return true;
  max_chunk = std::max<size_t>(max_chunk, item);
  bool compact = true;
  for (int d = 0; d < ndim; ++d) {
    if (shape[d] != 1 && strides[d] != CompactStrides(shape)[d]) compact = false;
  }
  if (compact) {
    const uint64_t total = elements * item;
    const uint64_t step = max_chunk / item * item;
    for (uint64_t sent = 0; sent < total; sent += step) {
      if (!sink(base + sent, static_cast<size_t>(std::min(step, total - sent)))) return false;
    }
    return true;
  }
  // Blocks: sub-tensors over the innermost dimensions [inner, ndim) that fit in one chunk;
  // an odometer walks the outer dimensions and blocks are packed into chunks.
  int inner = ndim;
  uint64_t block_elements = 1;
  while (inner > 0 && block_elements * static_cast<uint64_t>(shape[inner - 1]) * item <= max_chunk) {
    block_elements *= static_cast<uint64_t>(shape[inner - 1]);
    --inner;
  }
  const size_t block_bytes = static_cast<size_t>(block_elements * item);
  DLTensor block = src;
  block.data = const_cast<uint8_t*>(base);
  block.byte_offset = 0;
  block.ndim = ndim - inner;
  block.shape = shape.data() + inner;
  block.strides = strides.data() + inner;
  std::vector<uint8_t> chunk;
  chunk.reserve(std::max(block_bytes, max_chunk / block_bytes * block_bytes));
  std::vector<int64_t> index(static_cast<size_t>(inner), 0);
  int64_t offset = 0;  // in elements, of the current block
  const uint64_t blocks = elements / block_elements;
  for (uint64_t b = 0; b < blocks; ++b) {
    if (chunk.size() + block_bytes > max_chunk && !chunk.empty()) {
      if (!sink(chunk.data(), chunk.size())) return false;
      chunk.clear();
    }
    const size_t at = chunk.size();
    chunk.resize(at + block_bytes);
    block.data = const_cast<uint8_t*>(base + offset * static_cast<int64_t>(item));
    CopyToCompact(block, chunk.data() + at);
    for (int d = inner - 1; d >= 0; --d) {
      if (++index[static_cast<size_t>(d)] < shape[d]) {
        offset += strides[d];
        break;
      }
      offset -= strides[d] * (shape[d] - 1);
      index[static_cast<size_t>(d)] = 0;
    }
  }
  return chunk.empty() || sink(chunk.data(), chunk.size());
}

}  // namespace tensorbroker
