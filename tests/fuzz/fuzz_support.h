// What every fuzz target here shares: FUZZ_CHECK, which aborts (libFuzzer then keeps the input
// as a crash) when an invariant that a successful parse promises does not hold, and
// FrameReader, which cuts one fuzz input into several messages for the targets that need more
// than one (datagrams, descriptors): each frame is a 2-byte little-endian length, then that many
// bytes (fewer if the input ends first). corpus/generate_corpus.py writes the same format.
// Header-only; no state.
#ifndef TENSORBROKER_TESTS_FUZZ_FUZZ_SUPPORT_H_
#define TENSORBROKER_TESTS_FUZZ_FUZZ_SUPPORT_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/string_view.h"

#define FUZZ_CHECK(condition, ...)                                                             \
  do {                                                                                         \
    if (!(condition)) {                                                                        \
      std::fprintf(stderr, "%s:%d: invariant violated: %s: ", __FILE__, __LINE__, #condition); \
      std::fprintf(stderr, __VA_ARGS__);                                                       \
      std::fprintf(stderr, "\n");                                                              \
      std::abort();                                                                            \
    }                                                                                          \
  } while (0)

namespace tensorbroker::fuzz {

class FrameReader {
 public:
  FrameReader(const uint8_t* data, size_t size)
      : rest_(reinterpret_cast<const char*>(data), size) {}

  bool done() const { return rest_.empty(); }

  // The next byte (0 once the input is used up).
  uint8_t Byte() {
    if (rest_.empty()) return 0;
    const uint8_t b = static_cast<uint8_t>(rest_[0]);
    rest_.remove_prefix(1);
    return b;
  }

  // The next frame; empty once the input is used up.
  absl::string_view Frame() {
    const size_t length = Byte() | static_cast<size_t>(Byte()) << 8;
    const absl::string_view frame = rest_.substr(0, length);
    rest_.remove_prefix(frame.size());
    return frame;
  }

 private:
  absl::string_view rest_;
};

}  // namespace tensorbroker::fuzz

#endif  // TENSORBROKER_TESTS_FUZZ_FUZZ_SUPPORT_H_
