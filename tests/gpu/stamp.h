// The stamp the GPU tests write into a tensor and check in another process: element i of a
// uint32 tensor stamped with `seed`. Stateless.
#ifndef TENSORBROKER_TESTS_GPU_STAMP_H_
#define TENSORBROKER_TESTS_GPU_STAMP_H_

#include <cstdint>
#include <vector>

namespace tensorbroker::testing {

inline uint32_t Stamp(uint64_t i, uint32_t seed) {
  return static_cast<uint32_t>(i * 2654435761u) ^ seed;
}

inline std::vector<uint32_t> Stamped(uint64_t count, uint32_t seed) {
  std::vector<uint32_t> values(count);
  for (uint64_t i = 0; i < count; ++i) values[i] = Stamp(i, seed);
  return values;
}

}  // namespace tensorbroker::testing

#endif  // TENSORBROKER_TESTS_GPU_STAMP_H_
