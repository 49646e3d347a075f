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

namespace {

// Copies `count` elements of `item` bytes, `stride_bytes` apart in `src`, next to each other
// into `dst`. A zero stride (a broadcast) doubles what is already copied; a compact run is one
// memcpy; anything else goes element by element.
void GatherRun(const uint8_t* src, int64_t stride_bytes, int64_t count, size_t item, uint8_t* dst) {
  const size_t total = static_cast<size_t>(count) * item;
  if (total == 0) return;
  if (stride_bytes == static_cast<int64_t>(item)) {
    std::memcpy(dst, src, total);
    return;
  }
  if (stride_bytes == 0) {
    std::memcpy(dst, src, item);
    for (size_t filled = item; filled < total;) {
      const size_t n = std::min(filled, total - filled);
      std::memcpy(dst + filled, dst, n);
      filled += n;
    }
    return;
  }
  for (int64_t i = 0; i < count; ++i, dst += item, src += stride_bytes) {
    std::memcpy(dst, src, item);
  }
}

}  // namespace

CompactChunker::CompactChunker(const DLTensor& src, size_t max_chunk)
    : item_(ItemSize(src.dtype)),
      max_chunk_(std::max<size_t>(max_chunk, ItemSize(src.dtype))),
      base_(static_cast<const uint8_t*>(src.data) + src.byte_offset) {
  const std::vector<int64_t> given_shape(src.shape, src.shape + src.ndim);
  const std::vector<int64_t> given_strides =
      src.strides == nullptr ? CompactStrides(given_shape)
                             : std::vector<int64_t>(src.strides, src.strides + src.ndim);
  uint64_t elements = 1;
  for (int64_t d : given_shape) elements *= static_cast<uint64_t>(d);
  // Drop dimensions of size 1 and merge each dimension into the next one in when together they
  // step evenly: what is left is the fewest dimensions that walk the same elements in C order.
  for (size_t d = 0; d < given_shape.size(); ++d) {
    if (given_shape[d] == 1) continue;
    if (!shape_.empty() && strides_.back() == given_strides[d] * given_shape[d]) {
      shape_.back() *= given_shape[d];
      strides_.back() = given_strides[d];
    } else {
      shape_.push_back(given_shape[d]);
      strides_.push_back(given_strides[d]);
    }
  }
  total_ = elements;
  if (elements == 0 || shape_.empty() || (shape_.size() == 1 && strides_[0] == 1)) {
    compact_ = true;
    total_ = elements * item_;
    return;
  }
  compact_ = false;
  row_length_ = shape_.back();
  row_stride_ = strides_.back();
  shape_.pop_back();
  strides_.pop_back();
  index_.assign(shape_.size(), 0);
  chunk_.reserve(static_cast<size_t>(std::min<uint64_t>(total_, max_chunk_ / item_) * item_));
}

absl::Span<const uint8_t> CompactChunker::Next() {
  if (compact_) {
    const uint64_t step = max_chunk_ / item_ * item_;
    const uint64_t size = std::min(step, total_ - done_);
    absl::Span<const uint8_t> chunk(base_ + done_, static_cast<size_t>(size));
    done_ += size;
    return chunk;
  }
  // Rows of the innermost (merged) dimension, whole or in pieces, packed up to max_chunk_.
  const int64_t item = static_cast<int64_t>(item_);
  const int64_t capacity = static_cast<int64_t>(max_chunk_ / item_);
  int64_t taken = 0;  // elements in this chunk
  chunk_.clear();
  while (done_ < total_ && taken < capacity) {
    const int64_t piece = std::min(capacity - taken, row_length_ - row_position_);
    chunk_.resize(static_cast<size_t>((taken + piece) * item));
    GatherRun(base_ + (row_offset_ + row_position_ * row_stride_) * item, row_stride_ * item, piece,
              item_, chunk_.data() + taken * item);
    taken += piece;
    done_ += static_cast<uint64_t>(piece);
    row_position_ += piece;
    if (row_position_ < row_length_) continue;
    row_position_ = 0;
    for (int d = static_cast<int>(shape_.size()) - 1; d >= 0; --d) {  // the next row
      if (++index_[static_cast<size_t>(d)] < shape_[d]) {
        row_offset_ += strides_[d];
        break;
      }
      row_offset_ -= strides_[d] * (shape_[d] - 1);
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
