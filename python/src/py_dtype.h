// dtypes given from Python: a NumPy-spelled string ("float32", "bool", "bfloat16"), a NumPy
// dtype or scalar type (np.float32, np.dtype("int8")), or a torch dtype (torch.float16).
// Call with the GIL held.
#ifndef TENSORBROKER_PYTHON_SRC_PY_DTYPE_H_
#define TENSORBROKER_PYTHON_SRC_PY_DTYPE_H_

#include <dlpack/dlpack.h>
#include <pybind11/pybind11.h>

namespace tensorbroker::python {

// Throws StatusError(INVALID_ARGUMENT) naming `field` for anything the broker does not know.
DLDataType DTypeFromPython(pybind11::handle dtype, const char* field = "dtype");

// The NumPy dtype for `dtype`; TypeError when NumPy has none (bfloat16, float8 and complex32
// need ml_dtypes or torch).
pybind11::object NumpyDType(const DLDataType& dtype);

}  // namespace tensorbroker::python

#endif  // TENSORBROKER_PYTHON_SRC_PY_DTYPE_H_
