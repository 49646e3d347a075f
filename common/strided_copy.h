// Copies a strided CPU tensor (any strides, negative ones too, plus byte_offset) into a compact
// C-order buffer. Contiguous inner dimensions are merged into single memcpy calls. Pure
// function; thread-safe.
#ifndef TENSORBROKER_COMMON_STRIDED_COPY_H_
#define TENSORBROKER_COMMON_STRIDED_COPY_H_

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>
#include <functional>

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

// Hands the bytes of `src` in compact C order to `sink`, in pieces of at most `max_chunk`
// bytes (or one element, if larger). A compact `src` is passed through without copying.
// Stops early, returning false, when `sink` returns false.
bool StreamCompact(const DLTensor& src, size_t max_chunk,
                   const std::function<bool(const uint8_t* data, size_t size)>& sink);

}  // namespace tensorbroker

#endif  // TENSORBROKER_COMMON_STRIDED_COPY_H_
