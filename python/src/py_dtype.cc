#include "python/src/py_dtype.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "python/src/status_error.h"
#include "tensorbroker/dtype_names.h"

namespace tensorbroker::python {

namespace py = pybind11;

namespace {

// The NumPy-style name of whatever Python object stands for a dtype.
std::string DTypeSpelling(py::handle dtype) {
  if (py::isinstance<py::str>(dtype)) return dtype.cast<std::string>();
  const std::string module = py::str(py::type::handle_of(dtype).attr("__module__"));
  if (module == "torch") {  // torch.float32 prints as "torch.float32"
    std::string text = py::str(dtype);
    return absl::StartsWith(text, "torch.") ? text.substr(6) : text;
  }
  // NumPy dtypes, NumPy scalar types (np.float32), Python's bool/int/float/complex.
  try {
    return py::module_::import("numpy").attr("dtype")(dtype).attr("name").cast<std::string>();
  } catch (const py::error_already_set&) {
    return std::string(py::str(py::repr(dtype)));
  }
}

}  // namespace

DLDataType DTypeFromPython(py::handle dtype, const char* field) {
  const std::string name = DTypeSpelling(dtype);
  auto parsed = ParseDTypeName(name);
  if (!parsed.ok()) {
    throw StatusError(
        absl::InvalidArgumentError(absl::StrCat(field, ": ", parsed.status().message())));
  }
  return *parsed;
}

py::object NumpyDType(const DLDataType& dtype) {
  const std::string name = DTypeName(dtype);
  py::module_ numpy = py::module_::import("numpy");
  try {
    return numpy.attr("dtype")(name);
  } catch (const py::error_already_set&) {
  }
  try {  // bfloat16 / float8 types, if the user has ml_dtypes
    return numpy.attr("dtype")(py::module_::import("ml_dtypes").attr(name.c_str()));
  } catch (const py::error_already_set&) {
  }
  throw py::type_error(
      absl::StrCat("NumPy has no dtype '", name,
                   "' (install ml_dtypes for bfloat16/float8); use "
                   "torch.from_dlpack(t), or t.view(...) with a same-size NumPy dtype"));
}

}  // namespace tensorbroker::python
