#include "python/src/lease_export.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "common/strided_copy.h"
#include "python/src/py_dtype.h"
#include "python/src/status_error.h"

namespace tensorbroker::python {

namespace py = pybind11;

namespace {

constexpr const char* kVersionedName = "dltensor_versioned";
constexpr const char* kLegacyName = "dltensor";

// manager_ctx of a DLPack tensor that shares the broker's memory: the lease, how to let go of
// it, and the two ABI views of it.
struct LeaseExport {
  TensorPtr lease;
  LeaseDrop drop;
  DLManagedTensorVersioned versioned{};
  DLManagedTensor legacy{};
};

// manager_ctx of a copy made for __dlpack__(copy=True): bytes of its own, compact in C order.
struct CopyExport {
  std::unique_ptr<uint8_t[]> bytes;
  std::vector<int64_t> shape;
  DLManagedTensorVersioned versioned{};
  DLManagedTensor legacy{};
};

// Deleters, for either kind of export. A lease's release is usually local (queued, or a store
// into the lease table); the last tensor of a closed client ends its session, a round trip: the
// GIL goes meanwhile (lease_drop.h). A copy only frees memory.
void DeleteExport(LeaseExport* export_) {
  export_->drop.Run([export_] { delete export_; });
}

void DeleteExport(CopyExport* export_) { delete export_; }

template <typename Export>
void DeleteVersioned(DLManagedTensorVersioned* self) {
  DeleteExport(static_cast<Export*>(self->manager_ctx));
}

template <typename Export>
void DeleteLegacy(DLManagedTensor* self) {
  DeleteExport(static_cast<Export*>(self->manager_ctx));
}

// Capsule destructors: a capsule the consumer never renamed ("used_...") was never consumed, so
// its tensor is still ours to delete.
void DestroyVersionedCapsule(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, kVersionedName)) return;
  auto* tensor =
      static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(capsule, kVersionedName));
  tensor->deleter(tensor);
}

void DestroyLegacyCapsule(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, kLegacyName)) return;
  auto* tensor = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kLegacyName));
  tensor->deleter(tensor);
}

// `tensor` in a capsule of the chosen ABI, with `flags` (DLPack 1.x only); the capsule owns
// `owned` from then on, and its deleter deletes it.
template <typename Export>
py::capsule InCapsule(std::unique_ptr<Export> owned, const DLTensor& tensor, uint64_t flags,
                      bool versioned) {
  Export* export_ = owned.get();
  if (versioned) {
    export_->versioned.version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
    export_->versioned.manager_ctx = export_;
    export_->versioned.deleter = &DeleteVersioned<Export>;
    export_->versioned.flags = flags;
    export_->versioned.dl_tensor = tensor;
    py::capsule capsule(&export_->versioned, kVersionedName, &DestroyVersionedCapsule);
    owned.release();
    return capsule;
  }
  export_->legacy.manager_ctx = export_;
  export_->legacy.deleter = &DeleteLegacy<Export>;
  export_->legacy.dl_tensor = tensor;
  py::capsule capsule(&export_->legacy, kLegacyName, &DestroyLegacyCapsule);
  owned.release();
  return capsule;
}

}  // namespace

py::capsule MakeDLPackCopy(TensorPtr lease, const ExportLook& look, bool versioned) {
  auto copy = std::make_unique<CopyExport>();
  DLTensor source = lease->dl_tensor;
  source.dtype = look.dtype;  // same item size as the lease's
  copy->shape.assign(source.shape, source.shape + source.ndim);
  int64_t elements = 1;
  for (int64_t extent : copy->shape) elements *= extent;
  const size_t itemsize = (static_cast<size_t>(look.dtype.bits) * look.dtype.lanes + 7) / 8;
  copy->bytes.reset(new uint8_t[std::max<size_t>(1, static_cast<size_t>(elements) * itemsize)]);
  RunWithoutGil([&] {
    CopyToCompact(source, copy->bytes.get());
    lease.reset();  // the copy needs the broker's memory no more
  });
  DLTensor tensor{};
  tensor.data = copy->bytes.get();
  tensor.device = DLDevice{kDLCPU, 0};
  tensor.ndim = source.ndim;
  tensor.dtype = look.dtype;
  tensor.shape = copy->shape.data();
  tensor.strides = nullptr;  // compact
  // Writable: the copy is the consumer's.
  return InCapsule(std::move(copy), tensor, DLPACK_FLAG_BITMASK_IS_COPIED, versioned);
}

py::capsule MakeDLPackCapsule(TensorPtr lease, const LeaseDrop& drop, const ExportLook& look,
                              bool versioned) {
  auto shared = std::make_unique<LeaseExport>();
  DLTensor tensor = lease->dl_tensor;  // shape/strides stay owned by the lease
  tensor.dtype = look.dtype;
  tensor.device = look.device;
  shared->lease = std::move(lease);
  shared->drop = drop;
  return InCapsule(std::move(shared), tensor, look.read_only ? DLPACK_FLAG_BITMASK_READ_ONLY : 0,
                   versioned);
}

void BindLeaseBytes(py::module_& module) {
  py::class_<LeaseBytes>(module, "_LeaseBytes", py::buffer_protocol(),
                         "The bytes of one broker lease, for numpy.ndarray(buffer=...); the "
                         "lease ends when nothing refers to it any more.")
      .def_buffer([](LeaseBytes& bytes) {
        return py::buffer_info(bytes.start(), 1, "B", static_cast<py::ssize_t>(bytes.size()),
                               bytes.read_only());
      });
}

LeaseBytes::~LeaseBytes() {
  drop_.Run([this] { lease_.reset(); });
}

py::object MakeNumpyArray(TensorPtr lease, const LeaseDrop& drop, const ExportLook& look) {
  // Built through NumPy's Python API (numpy.ndarray over a buffer), not its C API, whose
  // structures changed in NumPy 2: the same code serves NumPy 1.x and 2.x.
  py::object dtype = NumpyDType(look.dtype);
  const py::ssize_t itemsize = dtype.attr("itemsize").cast<py::ssize_t>();
  const DLTensor& t = lease->dl_tensor;
  // The bytes the strides reach, from the lowest to one item past the highest (a stride may be
  // 0 or negative); an empty tensor reaches none.
  int64_t lowest = 0, highest = 0;
  bool empty = false;
  py::tuple shape(t.ndim), strides(t.ndim);
  for (int32_t d = 0; d < t.ndim; ++d) {
    const int64_t extent = t.shape[d], stride = t.strides[d] * itemsize;
    empty = empty || extent == 0;
    if (extent > 0) (stride < 0 ? lowest : highest) += (extent - 1) * stride;
    shape[d] = extent;
    strides[d] = stride;
  }
  auto* data = static_cast<uint8_t*>(t.data) + t.byte_offset;
  const size_t size = empty ? 0 : static_cast<size_t>(highest - lowest + itemsize);
  py::object bytes = py::cast(std::make_unique<LeaseBytes>(
      std::move(lease), drop, empty ? data : data + lowest, size, look.read_only));
  return py::module_::import("numpy").attr("ndarray")(shape, dtype, py::arg("buffer") = bytes,
                                                      py::arg("offset") = empty ? 0 : -lowest,
                                                      py::arg("strides") = strides);
}

}  // namespace tensorbroker::python
