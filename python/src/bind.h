// The `tensorbroker._core` extension's bindings, one function per Python class (or group of
// module-level functions), called in this order by PYBIND11_MODULE (module.cc): the order in which
// classes are registered decides how signatures name them, so a class is declared before the
// methods that return it. Each runs once, at import, with the GIL held.
#ifndef TENSORBROKER_PYTHON_SRC_BIND_H_
#define TENSORBROKER_PYTHON_SRC_BIND_H_

#include <pybind11/pybind11.h>

#include "python/src/py_client.h"
#include "python/src/py_tensor.h"

namespace tensorbroker::python {

// default_socket(), process_mappings() (bind_functions.cc).
void BindModuleFunctions(pybind11::module_& m);
// Cancellation (bind_functions.cc).
void BindCancellation(pybind11::module_& m);
// connect() (bind_functions.cc).
void BindConnect(pybind11::module_& m);
// Tensor: declared first (its methods bound by BindTensor, last), so that the Client's
// signatures name it (bind_tensor.cc).
pybind11::class_<PyTensor> DeclareTensor(pybind11::module_& m);
void BindTensor(pybind11::class_<PyTensor>& tensor);
// Client (bind_client.cc).
void BindClient(pybind11::module_& m);
// WatchEvent and Watch (bind_watch.cc).
void BindWatch(pybind11::module_& m);
// StreamWriter and StreamReader (bind_stream.cc).
void BindStreams(pybind11::module_& m);

}  // namespace tensorbroker::python

#endif  // TENSORBROKER_PYTHON_SRC_BIND_H_
