#include "bench/buffers.h"

#include <stdlib.h>

#include <algorithm>

namespace tensorbroker::bench {

__attribute__((noinline)) uint64_t SumWords(const void* p, size_t n) {
  asm volatile("" : : "r"(p) : "memory");
  const auto* w = static_cast<const uint64_t*>(p);
  const size_t nw = n / 8;
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  size_t i = 0;
  for (; i + 4 <= nw; i += 4) {
    s0 += w[i];
    s1 += w[i + 1];
    s2 += w[i + 2];
    s3 += w[i + 3];
  }
  for (; i < nw; ++i) s0 += w[i];
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t j = nw * 8; j < n; ++j) s1 += b[j];
  return s0 + s1 + s2 + s3;
}

void FillPattern(void* p, size_t n) {
  auto* w = static_cast<uint64_t*>(p);
  const size_t nw = n / 8;
  for (size_t i = 0; i < nw; ++i) w[i] = (i + 1) * 0x9E3779B97F4A7C15ull;
  auto* b = static_cast<unsigned char*>(p);
  for (size_t j = nw * 8; j < n; ++j) b[j] = static_cast<unsigned char>(j);
}

Buffer AllocBuffer(size_t n) {
  void* p = nullptr;
  if (posix_memalign(&p, 4096, std::max<size_t>(n, 1)) != 0) return nullptr;
  return Buffer(static_cast<unsigned char*>(p));
}

void* TensorData(const DLManagedTensorVersioned* t) {
  return static_cast<char*>(t->dl_tensor.data) + t->dl_tensor.byte_offset;
}

uint64_t TensorBytes(const DLTensor& t) {
  uint64_t n = (t.dtype.bits * t.dtype.lanes + 7) / 8;
  for (int i = 0; i < t.ndim; ++i) n *= static_cast<uint64_t>(t.shape[i]);
  return n;
}

}  // namespace tensorbroker::bench
