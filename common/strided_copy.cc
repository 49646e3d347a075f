#include "common/strided_copy.h"

#include <cstring>
#include <vector>

#include "common/tensor_layout.h"

namespace tensorbroker {

void CopyToCompact(const DLTensor& src, uint8_t* dst) {
  const int64_t item = static_cast<int64_t>(ItemSize(src.dtype));
  const int ndim = src.ndim;
  int64_t elements = 1;
  for (int i = 0; i < ndim; ++i) elements *= src.shape[i];
  if (elements == 0) return;
  const uint8_t* base = static_cast<const uint8_t*>(src.data) + src.byte_offset;
  if (src.strides == nullptr) {
    std::memcpy(dst, base, static_cast<size_t>(elements * item));
    return;
  }
  // Merge the innermost dimensions that are already laid out compactly into one block.
  int outer = ndim;  // dims [outer, ndim) form one contiguous block
  int64_t block_elements = 1;
  while (outer > 0) {
    const int d = outer - 1;
    if (src.shape[d] != 1 && src.strides[d] != block_elements) break;
    block_elements *= src.shape[d];
    --outer;
  }
  const size_t block_bytes = static_cast<size_t>(block_elements * item);
  if (outer == 0) {
    std::memcpy(dst, base, block_bytes);
    return;
  }
  // Odometer over the outer dimensions.
  std::vector<int64_t> index(static_cast<size_t>(outer), 0);
  int64_t offset = 0;  // in elements, of the current block's first element
  const int64_t blocks = elements / block_elements;
  for (int64_t b = 0; b < blocks; ++b) {
    std::memcpy(dst, base + offset * item, block_bytes);
    dst += block_bytes;
    for (int d = outer - 1; d >= 0; --d) {
      if (++index[static_cast<size_t>(d)] < src.shape[d]) {
        offset += src.strides[d];
        break;
      }
      offset -= src.strides[d] * (src.shape[d] - 1);
      index[static_cast<size_t>(d)] = 0;
    }
  }
}

}  // namespace tensorbroker
