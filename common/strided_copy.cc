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

CompactChunker::CompactChunker(const DLTensor& src, size_t max_chunk)
    : item_(ItemSize(src.dtype)),
      max_chunk_(std::max<size_t>(max_chunk, ItemSize(src.dtype))),
      base_(static_cast<const uint8_t*>(src.data) + src.byte_offset),
      shape_(src.shape, src.shape + src.ndim) {
  const int ndim = src.ndim;
  const std::vector<int64_t> compact_strides = CompactStrides(shape_);
  strides_ = src.strides == nullptr ? compact_strides
                                    : std::vector<int64_t>(src.strides, src.strides + ndim);
  uint64_t elements = 1;
  for (int64_t d : shape_) elements *= static_cast<uint64_t>(d);
  for (int d = 0; d < ndim; ++d) {
    if (shape_[d] != 1 && strides_[d] != compact_strides[d]) compact_ = false;
  }
  if (compact_ || elements == 0) {
    compact_ = true;
    total_ = elements * item_;
    return;
  }
  inner_ = ndim;
  uint64_t block_elements = 1;
  while (inner_ > 0 &&
         block_elements * static_cast<uint64_t>(shape_[inner_ - 1]) * item_ <= max_chunk_) {
    block_elements *= static_cast<uint64_t>(shape_[inner_ - 1]);
    --inner_;
  }
  block_bytes_ = static_cast<size_t>(block_elements * item_);
  total_ = elements / block_elements;
  block_ = src;
  block_.byte_offset = 0;
  block_.ndim = ndim - inner_;
  block_.shape = shape_.data() + inner_;
  block_.strides = strides_.data() + inner_;
  index_.assign(static_cast<size_t>(inner_), 0);
  chunk_.reserve(std::max(block_bytes_, max_chunk_ / block_bytes_ * block_bytes_));
}

absl::Span<const uint8_t> CompactChunker::Next() {
  if (compact_) {
    const uint64_t step = max_chunk_ / item_ * item_;
    const uint64_t size = std::min(step, total_ - done_);
    absl::Span<const uint8_t> chunk(base_ + done_, static_cast<size_t>(size));
    done_ += size;
    return chunk;
  }
  chunk_.clear();
  while (done_ < total_ && (chunk_.empty() || chunk_.size() + block_bytes_ <= max_chunk_)) {
    const size_t at = chunk_.size();
    chunk_.resize(at + block_bytes_);
    block_.data = const_cast<uint8_t*>(base_ + offset_ * static_cast<int64_t>(item_));
    CopyToCompact(block_, chunk_.data() + at);
    ++done_;
    for (int d = inner_ - 1; d >= 0; --d) {
      if (++index_[static_cast<size_t>(d)] < shape_[d]) {
        offset_ += strides_[d];
        break;
      }
      offset_ -= strides_[d] * (shape_[d] - 1);
      index_[static_cast<size_t>(d)] = 0;
    }
  }
  return absl::Span<const uint8_t>(chunk_.data(), chunk_.size());
}

bool StreamCompact(const DLTensor& src, size_t max_chunk,
                   const std::function<bool(const uint8_t* data, size_t size)>& sink) {
  CompactChunker chunker(src, max_chunk);
  for (absl::Span<const uint8_t> chunk = chunker.Next(); !chunk.empty(); chunk = chunker.Next()) {
    if (!sink(chunk.data(), chunk.size())) return false;
  }
  return true;
}

}  // namespace tensorbroker
