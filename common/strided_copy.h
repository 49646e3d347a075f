// Copies a strided CPU tensor (any strides, negative ones too, plus byte_offset) into a compact
// C-order buffer. Contiguous inner dimensions are merged into single memcpy calls. Pure
// function; thread-safe.
#ifndef TENSORBROKER_COMMON_STRIDED_COPY_H_
#define TENSORBROKER_COMMON_STRIDED_COPY_H_

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/types/span.h"

namespace tensorbroker {

// Walks `src` (valid, as for CopyToCompact) in C order as batches of `rows` runs of
// `run_bytes` contiguous bytes each; run r of a batch starts at byte `offset + r * pitch` from
// src's first element (data + byte_offset). `pitch` may be negative, zero or smaller than a run
// (broadcast or overlapping strides). Contiguous inner dimensions are merged into one run; the
// next dimension out becomes the rows, so 2-D copies (cudaMemcpy2D) take whole batches.
using RowBatchVisitor =
    std::function<void(int64_t offset, int64_t run_bytes, int64_t rows, int64_t pitch)>;
void ForEachRowBatch(const DLTensor& src, const RowBatchVisitor& visit);

// `src` must be valid (dtype whole bytes, non-negative shape); `dst` must hold
// elements * itemsize bytes. NULL strides mean compact.
void CopyToCompact(const DLTensor& src, uint8_t* dst);

// The bytes of `src` (valid, as for CopyToCompact; it must outlive this) in compact C order,
// pulled a chunk at a time: each at most `max_chunk` bytes (or one element, if larger). A
// compact `src` is handed out without copying. Not thread-safe.
class CompactChunker {
 public:
  CompactChunker(const DLTensor& src, size_t max_chunk);
  CompactChunker(const CompactChunker&) = delete;
  CompactChunker& operator=(const CompactChunker&) = delete;
  // The next chunk (valid until the next call), or an empty span when every byte was given.
  absl::Span<const uint8_t> Next();

 private:
  uint64_t item_ = 0;
  size_t max_chunk_ = 0;
  const uint8_t* base_ = nullptr;
  bool compact_ = true;
  uint64_t total_ = 0;  // compact: bytes; else elements
  uint64_t done_ = 0;   // compact: bytes handed out; else elements copied
  // Not compact: the tensor as rows of its innermost dimension (size-1 dimensions dropped,
  // evenly stepping ones merged), each copied whole or in pieces; an odometer over the outer
  // dimensions (shape_, strides_, index_) walks the rows. Strides and offsets in elements.
  std::vector<int64_t> shape_;
  std::vector<int64_t> strides_;
  std::vector<int64_t> index_;
  int64_t row_length_ = 0;
  int64_t row_stride_ = 0;
  int64_t row_offset_ = 0;    // of the current row's first element
  int64_t row_position_ = 0;  // elements of the current row already copied
  std::vector<uint8_t> chunk_;
};

// Hands the bytes of `src` in compact C order to `sink`, in pieces of at most `max_chunk`
// bytes (or one element, if larger). A compact `src` is passed through without copying.
// Stops early, returning false, when `sink` returns false.
bool StreamCompact(const DLTensor& src, size_t max_chunk,
                   const std::function<bool(const uint8_t* data, size_t size)>& sink);

}  // namespace tensorbroker

#endif  // TENSORBROKER_COMMON_STRIDED_COPY_H_
