#include "python/src/lease_export.h"

#include <pybind11/numpy.h>

#include <memory>
#include <utility>
#include <vector>

#include "python/src/py_dtype.h"
#include "python/src/status_error.h"

namespace tensorbroker::python {

namespace py = pybind11;

namespace {

constexpr const char* kVersionedName = "dltensor_versioned";
constexpr const char* kLegacyName = "dltensor";
constexpr const char* kArrayBaseName = "tensorbroker.lease";

// manager_ctx of every exported DLPack tensor: the lease and the two ABI views of it.
struct LeaseExport {
  TensorPtr lease;
  DLManagedTensorVersioned versioned{};
  DLManagedTensor legacy{};
};

void DeleteExport(LeaseExport* export_) {
  // Usually local (the release is queued); the last tensor of a closed client ends its session,
  // a round trip: let other Python threads run meanwhile.
  RunWithoutGil([export_] { delete export_; });
}

void DeleteVersioned(DLManagedTensorVersioned* self) {
  DeleteExport(static_cast<LeaseExport*>(self->manager_ctx));
}

void DeleteLegacy(DLManagedTensor* self) { DeleteExport(static_cast<LeaseExport*>(self->manager_ctx)); }

// Capsule destructors: a capsule the consumer never renamed ("used_...") was never consumed, so
// its tensor is still ours to delete.
void DestroyVersionedCapsule(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, kVersionedName)) return;
  auto* tensor = static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(capsule, kVersionedName));
  tensor->deleter(tensor);
}

void DestroyLegacyCapsule(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, kLegacyName)) return;
  auto* tensor = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kLegacyName));
  tensor->deleter(tensor);
}

void DestroyArrayBase(PyObject* capsule) {
  DeleteExport(static_cast<LeaseExport*>(PyCapsule_GetPointer(capsule, kArrayBaseName)));
}

}  // namespace

py::capsule MakeDLPackCapsule(TensorPtr lease, const ExportLook& look, bool versioned) {
  auto owned = std::make_unique<LeaseExport>();  // the capsule owns it once it exists
  LeaseExport* export_ = owned.get();
  DLTensor tensor = lease->dl_tensor;  // shape/strides stay owned by the lease
  tensor.dtype = look.dtype;
  tensor.device = look.device;
  export_->lease = std::move(lease);
  if (versioned) {
    export_->versioned.version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
    export_->versioned.manager_ctx = export_;
    export_->versioned.deleter = &DeleteVersioned;
    export_->versioned.flags = look.read_only ? DLPACK_FLAG_BITMASK_READ_ONLY : 0;
    export_->versioned.dl_tensor = tensor;
    py::capsule capsule(&export_->versioned, kVersionedName, &DestroyVersionedCapsule);
    owned.release();
    return capsule;
  }
  export_->legacy.manager_ctx = export_;
  export_->legacy.deleter = &DeleteLegacy;
  export_->legacy.dl_tensor = tensor;
  py::capsule capsule(&export_->legacy, kLegacyName, &DestroyLegacyCapsule);
  owned.release();
  return capsule;
}

py::object MakeNumpyArray(TensorPtr lease, const ExportLook& look) {
  py::dtype dtype = py::reinterpret_borrow<py::dtype>(NumpyDType(look.dtype));
  const DLTensor& t = lease->dl_tensor;
  std::vector<py::ssize_t> shape(t.shape, t.shape + t.ndim);
  std::vector<py::ssize_t> strides(t.strides, t.strides + t.ndim);
  for (py::ssize_t& stride : strides) stride *= dtype.itemsize();
  void* data = static_cast<uint8_t*>(t.data) + t.byte_offset;
  auto owned = std::make_unique<LeaseExport>();
  owned->lease = std::move(lease);
  py::capsule base(owned.get(), kArrayBaseName, &DestroyArrayBase);
  owned.release();
  py::array array(dtype, shape, strides, data, base);
  if (look.read_only) {
    py::detail::array_proxy(array.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  }
  return std::move(array);
}

}  // namespace tensorbroker::python
