// The Tensor class of `tensorbroker._core`: see bind.h.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "python/src/bind.h"
#include "python/src/status_error.h"
#include "tensorbroker/dtype_names.h"

namespace py = pybind11;

namespace tensorbroker::python {
namespace {

// The DLPack and NumPy exports, seal(), abort(), release().
void BindTensorExports(py::class_<PyTensor>& tensor) {
  tensor
      .def("__dlpack__", &PyTensor::DLPack, py::kw_only(), py::arg("stream") = py::none(),
           py::arg("max_version") = py::none(), py::arg("dl_device") = py::none(),
           py::arg("copy") = py::none(),
           R"doc(A DLPack capsule holding its own reference to the lease, released by its deleter.

"dltensor_versioned" (DLPack 1.x, with the read-only flag) when max_version allows it, else the
legacy "dltensor" that NumPy 1.24 and PyTorch 1.13 read.
stream: for CUDA tensors, the consumer's stream (DLPack: 1 legacy default, 2 per-thread, -1 no
    synchronisation; 0 is refused as ambiguous). The tensor is complete when get() returns (its
    producer's stream was synchronised before seal), so no wait is queued on it. For a mutable
    tensor, order concurrent writers yourself. CPU tensors take None (or -1).
dl_device: None, or the tensor's own (__dlpack_device__()); any other is BufferError.
copy: None or False share the broker's pages; True hands a private, writable copy (CPU tensors
    only; BufferError for CUDA ones), flagged as copied in DLPack 1.x.)doc")
      .def("__dlpack_device__", &PyTensor::DLPackDevice,
           "(device_type, device_id): (1, 0) = CPU (pinned tensors too), (2, N) = CUDA device N "
           "of this process.")
      .def("__array__", &PyTensor::Array, py::arg("dtype") = py::none(),
           py::arg("copy") = py::none(),
           "A NumPy view of the broker's pages (its own reference to the lease); read-only unless "
           "writable.")
      .def(
          "numpy", [](PyTensor& self) { return self.Array(py::none(), py::none()); },
          "np.asarray(t): a zero-copy NumPy view, bool included.")
      .def("torch", &PyTensor::Torch,
           "torch.from_dlpack(t); bool tensors come back as torch.bool (through a uint8 view where "
           "torch does not take DLPack's kDLBool, as 1.13).")
      .def("view", &PyTensor::View, py::arg("dtype"),
           "The same bytes as another dtype of the same item size (e.g. bool as uint8), with a "
           "reference of its own to the lease.")
      .def("seal", &PyTensor::Seal, py::arg("stream") = py::none(),
           R"doc(Publish a tensor from create(). Unless it is mutable it is read-only from now on:
do not write through views taken before.

stream: CUDA tensors: the stream you wrote it on (torch.cuda.Stream, cupy.cuda.Stream or a
    cudaStream_t int); seal() waits for that stream's work first, so no consumer ever sees
    unfinished writes. None: waits for all work on the tensor's GPU (cudaDeviceSynchronize).)doc")
      .def("abort", &PyTensor::Abort, "Drop a tensor from create() that was never sealed.")
      .def("release", &PyTensor::Release,
           "End this object's lease now (views made from it keep theirs). Idempotent.");
}

// name, shape, ... and the context manager.
void BindTensorPropertiesAndLifetime(py::class_<PyTensor>& tensor) {
  tensor
      .def_property_readonly(
          "name", [](const PyTensor& t) { return t.info().name; },
          "The name it was published (or created) under.")
      .def_property_readonly(
          "shape", [](const PyTensor& t) { return py::tuple(py::cast(t.info().shape)); },
          "Its dimensions.")
      .def_property_readonly(
          "strides", [](const PyTensor& t) { return py::tuple(py::cast(t.info().strides)); },
          "In elements, as DLPack.")
      .def_property_readonly(
          "ndim", [](const PyTensor& t) { return t.info().shape.size(); },
          "The number of dimensions.")
      .def_property_readonly(
          "dtype", [](const PyTensor& t) { return tensorbroker::DTypeName(t.dtype()); },
          "NumPy spelling: \"float32\", \"bool\", \"bfloat16\", ...")
      .def_property_readonly(
          "nbytes", [](const PyTensor& t) { return t.info().nbytes; }, "Bytes of its elements.")
      .def_property_readonly(
          "version", [](const PyTensor& t) { return t.info().version; },
          "The version of the name this tensor is (1 for the first).")
      .def_property_readonly(
          "mutable", [](const PyTensor& t) { return t.info().is_mutable; },
          "Whether it stays writable for every holder after seal().")
      .def_property_readonly(
          "readonly", [](const PyTensor& t) { return !t.writable(); },
          "Whether this process may not write it (mapped read-only).")
      .def_property_readonly(
          "sealed", [](const PyTensor& t) { return !t.created(); },
          "Whether it is published (False for an unsealed create()).")
      .def_property_readonly("released", &PyTensor::released,
                             "Whether release() was called (views made before stay valid).")
      .def_property_readonly("device", &PyTensor::device,
                             "\"cpu\", \"cuda:N\" (this process's ordinal) or \"cuda_host\" "
                             "(pinned CPU memory).")
      .def_property_readonly("pinned", &PyTensor::pinned,
                             "CPU memory page-locked for CUDA (create/get with pinned=True).")
      .def(
          "__enter__", [](PyTensor& self) -> PyTensor& { return self; },
          py::return_value_policy::reference)
      .def("__exit__",
           [](PyTensor& self, py::args) {
             if (self.created() && !self.released()) {
               try {
                 self.Abort();
               } catch (const StatusError&) {
               }
             }
             self.Release();
           })
      .def("__repr__", &PyTensor::Repr);
}

}  // namespace

py::class_<PyTensor> DeclareTensor(py::module_& m) {
  return py::class_<PyTensor>(m, "Tensor",
                              R"doc(A broker tensor this process holds a lease on.

Zero-copy views: np.asarray(t), np.from_dlpack(t), torch.from_dlpack(t), t.numpy(), t.torch().
Each view holds its own reference to the lease (one broker lease per process and version), so it stays valid after t.release() or after `t` is
garbage-collected; the broker frees the memory when the last lease anywhere ends.
Read-only unless the tensor is mutable or came from create() and is not sealed yet.
Usable as a context manager: release() on exit (and abort() if created and never sealed).)doc");
}

void BindTensor(py::class_<PyTensor>& tensor) {
  BindTensorExports(tensor);
  BindTensorPropertiesAndLifetime(tensor);
}

}  // namespace tensorbroker::python
