#include "python/src/py_device.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "python/src/status_error.h"
#include "tensorbroker/dtype_names.h"

namespace tensorbroker::python {

namespace py = pybind11;

DLDevice DeviceFromPython(py::handle device, const char* field) {
  return ValueOrThrow(ParseDeviceName(std::string(py::str(device)), field));
}

uintptr_t StreamFromPython(py::handle stream, const char* field) {
  py::object value = py::reinterpret_borrow<py::object>(stream);
  if (py::hasattr(value, "cuda_stream")) {
    value = value.attr("cuda_stream");
  } else if (py::hasattr(value, "ptr")) {
    value = value.attr("ptr");
  }
  if (!py::isinstance<py::int_>(value) || value.cast<py::int_>() < py::int_(0)) {
    throw StatusError(absl::InvalidArgumentError(
        absl::StrCat(field,
                     ": expected a cudaStream_t value (int >= 0), a torch.cuda.Stream or a "
                     "cupy.cuda.Stream, got ",
                     std::string(py::repr(stream)).substr(0, 64))));
  }
  return value.cast<uintptr_t>();
}

}  // namespace tensorbroker::python
