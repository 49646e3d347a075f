// The `tensorbroker._core` extension: maps broker errors to tensorbroker.errors and binds each
// class with its own Bind... function (bind.h), in the order that keeps signatures naming Python
// types. The public package (tensorbroker/__init__.py) re-exports it.
#include <pybind11/pybind11.h>

#include "python/src/bind.h"
#include "python/src/lease_export.h"
#include "python/src/status_error.h"

namespace py = pybind11;
namespace tbp = tensorbroker::python;

PYBIND11_MODULE(_core, m) {
  m.doc() = "tensorbroker's native core; use the `tensorbroker` package.";
  py::module_::import("tensorbroker.errors");  // fail at import, not at the first error
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const tbp::StatusError& e) {
      tbp::RaiseInPython(e);
    }
  });

  tbp::BindLeaseBytes(m);
  tbp::BindModuleFunctions(m);
  tbp::BindCancellation(m);
  // Declared before the methods that return them, so signatures name them as Python does.
  py::class_<tbp::PyTensor> tensor = tbp::DeclareTensor(m);
  tbp::BindClient(m);
  tbp::BindWatch(m);
  tbp::BindStreams(m);
  tbp::BindConnect(m);
  tbp::BindTensor(tensor);
}
