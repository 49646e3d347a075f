#include "python/src/status_error.h"

#include <string>

#include "absl/status/status.h"

namespace tensorbroker::python {

namespace py = pybind11;

void RaiseInPython(const StatusError& error) {
  const absl::Status& status = error.status();
  const std::string code = absl::StatusCodeToString(status.code());  // e.g. "NOT_FOUND"
  const std::string message(status.message());
  py::object errors = py::module_::import("tensorbroker.errors");
  py::object cls = errors.attr("error_class_for_code")(code);
  py::object exception = cls(message);
  exception.attr("code") = code;
  PyErr_SetObject(cls.ptr(), exception.ptr());
}

}  // namespace tensorbroker::python
