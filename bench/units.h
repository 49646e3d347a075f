// Units shared by every part of the bench: byte-size constants and the monotonic clock in ns.
// Header only; pure constants and a thread-safe clock read.
#ifndef TENSORBROKER_BENCH_UNITS_H_
#define TENSORBROKER_BENCH_UNITS_H_

#include <chrono>
#include <cstdint>

namespace tensorbroker::bench {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;
constexpr uint64_t kGiB = 1024 * kMiB;

inline int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

}  // namespace tensorbroker::bench

#endif  // TENSORBROKER_BENCH_UNITS_H_
