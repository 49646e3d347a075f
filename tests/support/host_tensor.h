// A DLTensor view of host memory, for the tests and the benches to Put or write what they
// hold in a std::vector.
#ifndef TENSORBROKER_TESTS_SUPPORT_HOST_TENSOR_H_
#define TENSORBROKER_TESTS_SUPPORT_HOST_TENSOR_H_

#include <dlpack/dlpack.h>

#include <cstdint>
#include <vector>

namespace tensorbroker::testing {

// A contiguous-by-default DLTensor view of host memory; `shape` and `strides` must outlive it.
inline DLTensor HostTensor(void* data, std::vector<int64_t>& shape, DLDataType dtype,
                           int64_t* strides = nullptr, uint64_t byte_offset = 0) {
  DLTensor t{};
  t.data = data;
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = static_cast<int32_t>(shape.size());
  t.dtype = dtype;
  t.shape = shape.data();
  t.strides = strides;
  t.byte_offset = byte_offset;
  return t;
}

}  // namespace tensorbroker::testing

#endif  // TENSORBROKER_TESTS_SUPPORT_HOST_TENSOR_H_
