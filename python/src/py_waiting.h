// How the package's blocking calls wait (get(), Watch.next()): with the GIL released, in slices
// on the main thread so that Ctrl-C interrupts them, and with timeouts given in seconds.
// Stateless; call with the GIL held.
#ifndef TENSORBROKER_PYTHON_SRC_PY_WAITING_H_
#define TENSORBROKER_PYTHON_SRC_PY_WAITING_H_

#include <pybind11/pybind11.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "absl/status/status.h"
#include "python/src/status_error.h"

namespace tensorbroker::python {

// On the main thread (the only one Python's signal handlers run on), waits come in slices
// this long, checking for KeyboardInterrupt between them. Other threads wait in one piece (up
// to kLongestSlice): a Cancellation (or a close()) ends their wait, and the daemon sees one
// steady waiter.
inline constexpr std::chrono::milliseconds kWaitSlice(250);
inline constexpr std::chrono::milliseconds kLongestSlice = std::chrono::hours(24);

// Whether this is Python's main thread.
bool OnMainThread();

// Runs `call` (a Client method) with the GIL released and returns its value.
template <typename Call>
auto Unlocked(Call&& call) {
  decltype(call()) result = absl::UnknownError("not run");
  {
    GilReleased released;
    result = call();
  }
  return result;
}

// `seconds` as milliseconds (rounded up; at most about 31 years); INVALID_ARGUMENT naming
// `field` for a negative or NaN value.
std::chrono::milliseconds SecondsToMillis(double seconds, const char* field);

// Calls `attempt(slice)` (a wait of at most `slice` that returns absl::StatusOr<std::optional<T>>)
// with the GIL released, slice after slice, until it returns an error or a value, or `timeout`
// seconds passed (nullopt; None waits for ever). Ctrl-C between slices raises
// KeyboardInterrupt.
template <typename Attempt>
auto WaitInSlices(std::optional<double> timeout, Attempt&& attempt)
    -> decltype(attempt(std::chrono::milliseconds(0))) {
  const bool forever = !timeout.has_value();
  const auto deadline =
      std::chrono::steady_clock::now() +
      (forever ? std::chrono::milliseconds(0) : SecondsToMillis(*timeout, "timeout"));
  const std::chrono::milliseconds longest = OnMainThread() ? kWaitSlice : kLongestSlice;
  while (true) {
    auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    const auto slice = forever ? longest : std::clamp(left, std::chrono::milliseconds(0), longest);
    auto result = Unlocked([&] { return attempt(slice); });
    if (!result.ok() || result->has_value()) return result;
    if (!forever && std::chrono::steady_clock::now() >= deadline) return result;
    if (PyErr_CheckSignals() != 0) throw pybind11::error_already_set();  // Ctrl-C
  }
}

}  // namespace tensorbroker::python

#endif  // TENSORBROKER_PYTHON_SRC_PY_WAITING_H_
