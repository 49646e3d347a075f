// Local memory helpers: aligned heap buffers, a fill pattern, a word-sum that really reads
// every byte, and where a DLPack tensor's bytes are. Pure functions; callers own the buffers.
#ifndef TENSORBROKER_BENCH_BUFFERS_H_
#define TENSORBROKER_BENCH_BUFFERS_H_

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

namespace tensorbroker::bench {

// Sums `n` bytes as uint64 words (a tail shorter than a word is summed bytewise). Opaque to the
// optimizer, so it really reads every byte, also of memory never written.
uint64_t SumWords(const void* p, size_t n);

// Writes a deterministic pattern over `n` bytes.
void FillPattern(void* p, size_t n);

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<unsigned char, FreeDeleter>;

// A page-aligned buffer of `n` bytes (not touched); nullptr when out of memory.
Buffer AllocBuffer(size_t n);

// The first byte of the tensor's data.
void* TensorData(const DLManagedTensorVersioned* t);

// The tensor's size in bytes (dense).
uint64_t TensorBytes(const DLTensor& t);

}  // namespace tensorbroker::bench

#endif  // TENSORBROKER_BENCH_BUFFERS_H_
