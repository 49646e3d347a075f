// Hands one broker lease to a Python consumer: as a DLPack capsule ("dltensor_versioned" or the
// pre-1.0 "dltensor") or as a NumPy array. The lease ends when the consumer is done: when the
// capsule's deleter runs (or the capsule is dropped unused), or when the array is collected.
//
// Ownership: each export takes a TensorPtr (its own reference to the client's lease, from Client::Retain: local) and owns
// it until its deleter runs. Deleters may run on any thread, with or without the GIL, and after
// the interpreter has finalized: they never touch Python then (see RunWithoutGil).
#ifndef TENSORBROKER_PYTHON_SRC_LEASE_EXPORT_H_
#define TENSORBROKER_PYTHON_SRC_LEASE_EXPORT_H_

#include <dlpack/dlpack.h>
#include <pybind11/pybind11.h>

#include "tensorbroker/client.h"

namespace tensorbroker::python {

// What the export shows the consumer; the lease's own tensor supplies data, shape and strides.
struct ExportLook {
  DLDataType dtype{};  // may differ from the lease's (Tensor.view): same item size
  bool read_only = true;
  DLDevice device{kDLCPU, 0};  // pinned host memory is shown as kDLCPU (see PyTensor)
};

// A DLPack capsule; `versioned` picks the DLPack >= 1.0 ABI (with the read-only flag).
pybind11::capsule MakeDLPackCapsule(TensorPtr lease, const ExportLook& look, bool versioned);

// A NumPy array over the lease's memory, writeable unless `look.read_only`.
pybind11::object MakeNumpyArray(TensorPtr lease, const ExportLook& look);

}  // namespace tensorbroker::python

#endif  // TENSORBROKER_PYTHON_SRC_LEASE_EXPORT_H_
