// Hands one broker lease to a Python consumer: as a DLPack capsule ("dltensor_versioned" or the
// pre-1.0 "dltensor") or as a NumPy array (over a _LeaseBytes buffer). The lease ends when the
// consumer is done: when the capsule's deleter runs (or the capsule is dropped unused), or when the
// array is collected.
//
// Ownership: each export takes a TensorPtr (its own reference to the client's lease, from
// Client::Retain: local) and owns it until its deleter runs. Deleters may run on any thread, with
// or without the GIL, and after the interpreter has finalized: they never touch Python then (see
// RunWithoutGil).
#ifndef TENSORBROKER_PYTHON_SRC_LEASE_EXPORT_H_
#define TENSORBROKER_PYTHON_SRC_LEASE_EXPORT_H_

#include <dlpack/dlpack.h>
#include <pybind11/pybind11.h>

#include <cstddef>
#include <utility>

#include "python/src/lease_drop.h"
#include "tensorbroker/client.h"

namespace tensorbroker::python {

// What the export shows the consumer; the lease's own tensor supplies data, shape and strides.
struct ExportLook {
  DLDataType dtype{};  // may differ from the lease's (Tensor.view): same item size
  bool read_only = true;
  DLDevice device{kDLCPU, 0};  // pinned host memory is shown as kDLCPU (see PyTensor)
};

// A DLPack capsule; `versioned` picks the DLPack >= 1.0 ABI (with the read-only flag). `drop`:
// how its deleter lets go of the lease.
pybind11::capsule MakeDLPackCapsule(TensorPtr lease, const LeaseDrop& drop, const ExportLook& look,
                                    bool versioned);

// A DLPack capsule of a copy of the lease's CPU tensor (__dlpack__(copy=True)): compact, in
// memory of its own that the consumer may write (DLPACK_FLAG_BITMASK_IS_COPIED when versioned);
// the lease ends once the bytes are copied.
pybind11::capsule MakeDLPackCopy(TensorPtr lease, const ExportLook& look, bool versioned);

// A NumPy array over the lease's memory, writeable unless `look.read_only`: numpy.ndarray over
// a _LeaseBytes buffer (no NumPy C API), which owns the lease while the array refers to it.
pybind11::object MakeNumpyArray(TensorPtr lease, const LeaseDrop& drop, const ExportLook& look);

// Owns a lease and shows its bytes through the buffer protocol (1-D, unsigned bytes).
class LeaseBytes {
 public:
  LeaseBytes(TensorPtr lease, LeaseDrop drop, void* start, size_t size, bool read_only)
      : lease_(std::move(lease)),
        drop_(std::move(drop)),
        start_(start),
        size_(size),
        read_only_(read_only) {}
  ~LeaseBytes();  // ends the lease (as drop_ says)
  LeaseBytes(const LeaseBytes&) = delete;
  LeaseBytes& operator=(const LeaseBytes&) = delete;

  void* start() const { return start_; }
  size_t size() const { return size_; }
  bool read_only() const { return read_only_; }

 private:
  TensorPtr lease_;
  LeaseDrop drop_;
  void* start_;
  size_t size_;
  bool read_only_;
};

// Registers _LeaseBytes in the extension module.
void BindLeaseBytes(pybind11::module_& module);

}  // namespace tensorbroker::python

#endif  // TENSORBROKER_PYTHON_SRC_LEASE_EXPORT_H_
