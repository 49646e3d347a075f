// Python spellings of devices and CUDA streams for the tensorbroker module.
//
// Devices: "cpu", "cuda" (= "cuda:0"), "cuda:N", or anything whose str() is one of those
// (torch.device). N is an ordinal in this process. Streams (Tensor.seal): an int (a
// cudaStream_t's value), or an object with `cuda_stream` (torch.cuda.Stream) or `ptr`
// (cupy.cuda.Stream).
// Pure functions; call with the GIL held.
#ifndef TENSORBROKER_PYTHON_SRC_PY_DEVICE_H_
#define TENSORBROKER_PYTHON_SRC_PY_DEVICE_H_

#include <dlpack/dlpack.h>
#include <pybind11/pybind11.h>

#include <cstdint>

namespace tensorbroker::python {

// Throws StatusError(INVALID_ARGUMENT) naming `field` for anything else.
DLDevice DeviceFromPython(pybind11::handle device, const char* field = "device");
uintptr_t StreamFromPython(pybind11::handle stream, const char* field = "stream");

}  // namespace tensorbroker::python

#endif  // TENSORBROKER_PYTHON_SRC_PY_DEVICE_H_
