#include "python/src/py_waiting.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"

namespace tensorbroker::python {

namespace py = pybind11;

namespace {

// Longer waits are taken as this long (over 31 years).
constexpr double kMaxSeconds = 1e9;

}  // namespace

bool OnMainThread() {
  static const unsigned long main_ident =
      py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
  return PyThread_get_thread_ident() == main_ident;
}

std::chrono::milliseconds SecondsToMillis(double seconds, const char* field) {
  if (std::isnan(seconds) || seconds < 0) {
    throw StatusError(absl::InvalidArgumentError(
        absl::StrCat(field, " = ", seconds, "; must be a number of seconds >= 0")));
  }
  return std::chrono::milliseconds(
      static_cast<int64_t>(std::ceil(std::min(seconds, kMaxSeconds) * 1000.0)));
}

}  // namespace tensorbroker::python
