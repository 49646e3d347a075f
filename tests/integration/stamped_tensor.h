// Self-describing tensor contents for the tests that check every byte read against what its
// producer wrote (the kill loop, the chaos soak): a uint64 tensor published under `name` with
// `stamp` holds its name's hash in element 0, the stamp in element 1, and a mix of both and
// the index in every other element. A reader that knows only the name can so tell the
// producer's bytes from another tensor's, from freed or reused memory, and from a half-written
// tensor. Header-only; no state.
#ifndef TENSORBROKER_TESTS_INTEGRATION_STAMPED_TENSOR_H_
#define TENSORBROKER_TESTS_INTEGRATION_STAMPED_TENSOR_H_

#include <cstdint>
#include <optional>
#include <string>

namespace tensorbroker::testing {

// FNV-1a of the name.
inline uint64_t NameHash(const std::string& name) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : name) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

// Element i of a tensor whose name hashes to `hash`, written with `stamp`.
inline uint64_t StampedElement(uint64_t hash, uint64_t stamp, uint64_t i) {
  return i == 0 ? hash : i == 1 ? stamp : (hash ^ (stamp * 0x9e3779b97f4a7c15ull)) + i;
}

// Fills `elements` (at least 2) values for `name` and `stamp`.
inline void FillStamped(const std::string& name, uint64_t stamp, uint64_t* values,
                        uint64_t elements) {
  const uint64_t hash = NameHash(name);
  for (uint64_t i = 0; i < elements; ++i) values[i] = StampedElement(hash, stamp, i);
}

// Where `values` differs from what a producer of `name` wrote with the stamp it holds in
// element 1: the first index that does not match (element 0 for another name's bytes), or
// nullopt when every element is the producer's.
inline std::optional<uint64_t> FirstUnstampedElement(const std::string& name,
                                                     const uint64_t* values, uint64_t elements) {
  const uint64_t hash = NameHash(name);
  if (elements < 2 || values[0] != hash) return 0;
  const uint64_t stamp = values[1];
  for (uint64_t i = 2; i < elements; ++i) {
    if (values[i] != StampedElement(hash, stamp, i)) return i;
  }
  return std::nullopt;
}

}  // namespace tensorbroker::testing

#endif  // TENSORBROKER_TESTS_INTEGRATION_STAMPED_TENSOR_H_
