// Copies a strided CPU tensor (any strides, negative ones too, plus byte_offset) into a compact
// C-order buffer. Contiguous inner dimensions are merged into single memcpy calls. Pure
// function; thread-safe.
#ifndef TENSORBROKER_COMMON_STRIDED_COPY_H_
#define TENSORBROKER_COMMON_STRIDED_COPY_H_

#include <dlpack/dlpack.h>

#include <cstdint>

namespace tensorbroker {

// `src` must be valid (dtype whole bytes, non-negative shape); `dst` must hold
// elements * itemsize bytes. NULL strides mean compact.
void CopyToCompact(const DLTensor& src, uint8_t* dst);

}  // namespace tensorbroker

#endif  // TENSORBROKER_COMMON_STRIDED_COPY_H_
