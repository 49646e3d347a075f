#include "python/src/py_tensor.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "python/src/lease_export.h"
#include "python/src/py_device.h"
#include "python/src/py_dtype.h"
#include "python/src/status_error.h"
#include "tensorbroker/dtype_names.h"

namespace tensorbroker::python {

namespace py = pybind11;

namespace {

PyTensor::Handle ShareHandle(TensorPtr lease, const LeaseDrop& drop) {
  return PyTensor::Handle(
      lease.release(), [drop](DLManagedTensorVersioned* t) { drop.Run([t] { t->deleter(t); }); });
}

bool IsNone(const py::handle& h) { return h.is_none(); }

}  // namespace

PyTensor::PyTensor(std::shared_ptr<Client> client, TensorPtr lease,
                   std::shared_ptr<const TensorInfo> info, bool created, LeaseDrop drop)
    : client_(std::move(client)),
      drop_(std::move(drop)),
      info_(std::move(info)),
      dtype_(info_->dtype),
      device_(lease->dl_tensor.device),
      writable_((lease->flags & DLPACK_FLAG_BITMASK_READ_ONLY) == 0),
      created_(created) {
  handle_ = ShareHandle(std::move(lease), drop_);
}

PyTensor::~PyTensor() {
  Release();
  // The last reference to a Client ends its session: a round trip, without the GIL.
  if (client_.use_count() > 1) {
    client_.reset();
  } else {
    RunWithoutGil([this] { client_.reset(); });
  }
}

void PyTensor::Release() {
  Handle dropped = std::move(handle_);
  handle_ = nullptr;
  dropped.reset();  // the deleter releases the GIL itself where it may block
}

PyTensor::Handle PyTensor::LiveHandle() const {
  if (handle_ == nullptr) {
    throw StatusError(absl::FailedPreconditionError(
        absl::StrCat("tensor '", info_->name, "' was released; get() it again")));
  }
  return handle_;
}

std::unique_ptr<PyTensor> PyTensor::Standalone(std::shared_ptr<Client> client, TensorPtr lease,
                                               TensorInfo info) {
  auto tensor = std::make_unique<PyTensor>(std::move(client), std::move(lease),
                                           std::make_shared<const TensorInfo>(std::move(info)),
                                           /*created=*/false);
  tensor->standalone_ = true;
  return tensor;
}

TensorPtr PyTensor::RetainLease() const {
  Handle handle = LiveHandle();
  if (standalone_) {
    // Another DLPack tensor over the same memory that holds a reference to the handle.
    auto* out = new DLManagedTensorVersioned(*handle);
    out->manager_ctx = new Handle(handle);
    out->deleter = [](DLManagedTensorVersioned* t) {
      delete static_cast<Handle*>(t->manager_ctx);
      delete t;
    };
    return TensorPtr(out);
  }
  // Local (a reference to this client's lease): no round trip, so the GIL stays.
  return TensorPtr(ValueOrThrow(client_->Retain(*handle)));
}

DLDevice PyTensor::ExportDevice() const { return pinned() ? DLDevice{kDLCPU, 0} : device_; }

std::string PyTensor::device() const { return DeviceName(device_); }

py::object PyTensor::DLPack(py::object stream, py::object max_version, py::object dl_device,
                            py::object copy) {
  // The broker's bytes are complete when get() returns (the producer's stream was synchronised
  // before seal), so the consumer's stream needs no wait: any valid stream is accepted as is.
  if (device_.device_type == kDLCUDA) {
    if (!IsNone(stream) && py::isinstance<py::int_>(stream) && stream.cast<int64_t>() == 0) {
      throw py::value_error(
          "stream 0 is ambiguous for CUDA (DLPack): use 1 for the legacy "
          "default stream, 2 for per-thread, -1 for none");
    }
  } else if (!IsNone(stream) &&
             !(py::isinstance<py::int_>(stream) && stream.cast<int64_t>() == -1)) {
    throw py::buffer_error(absl::StrCat("stream must be None: tensor '", info_->name, "' is in ",
                                        DeviceName(device_), " memory"));
  }
  const DLDevice shown = ExportDevice();
  if (!IsNone(dl_device)) {
    py::tuple device = dl_device.cast<py::tuple>();
    if (device.size() != 2 || device[0].cast<int>() != shown.device_type ||
        device[1].cast<int>() != shown.device_id) {
      throw py::buffer_error(absl::StrCat(
          "dl_device ", std::string(py::str(dl_device)), " is not available: the tensor is on (",
          static_cast<int>(shown.device_type), ", ", shown.device_id, "); copy it yourself"));
    }
  }
  const bool copied = !IsNone(copy) && copy.cast<bool>();
  if (copied && shown.device_type != kDLCPU) {
    throw py::buffer_error(absl::StrCat(
        "copy=True is supported for CPU tensors only: tensor '", info_->name, "' is in ",
        DeviceName(device_), " memory (take the shared one, copy=None, and clone it there)"));
  }
  bool versioned = false;
  if (!IsNone(max_version)) {
    py::tuple version = max_version.cast<py::tuple>();
    versioned = version.size() >= 1 && version[0].cast<int>() >= 1;
  }
  ExportLook look{dtype_, !writable_, shown};
  if (copied) return MakeDLPackCopy(RetainLease(), look, versioned);
  return MakeDLPackCapsule(RetainLease(), drop_, look, versioned);
}

py::tuple PyTensor::DLPackDevice() const {
  const DLDevice shown = ExportDevice();
  return py::make_tuple(static_cast<int>(shown.device_type), shown.device_id);
}

py::object PyTensor::Array(py::object dtype, py::object copy) {
  if (device_.device_type == kDLCUDA) {
    throw py::type_error(absl::StrCat("tensor '", info_->name, "' is in ", DeviceName(device_),
                                      " memory; NumPy needs CPU memory (use torch.from_dlpack "
                                      "or cupy.from_dlpack, then copy to the host)"));
  }
  NumpyDType(dtype_);  // fail before taking a lease if NumPy lacks the dtype
  ExportLook look{dtype_, !writable_, ExportDevice()};
  py::object array = MakeNumpyArray(RetainLease(), drop_, look);
  if (!IsNone(dtype)) {
    py::object target = py::module_::import("numpy").attr("dtype")(dtype);
    if (!target.equal(array.attr("dtype"))) {
      if (!IsNone(copy) && !copy.cast<bool>()) {
        throw py::value_error(absl::StrCat("copy=False, but dtype ", std::string(py::str(target)),
                                           " differs from the tensor's ", DTypeName(dtype_)));
      }
      return array.attr("astype")(target);
    }
  }
  if (!IsNone(copy) && copy.cast<bool>()) return array.attr("copy")();
  return array;
}

std::unique_ptr<PyTensor> PyTensor::View(py::handle dtype) {
  const DLDataType target = DTypeFromPython(dtype);
  if (target.bits != dtype_.bits) {
    throw StatusError(absl::InvalidArgumentError(
        absl::StrCat("dtype: view() keeps the item size; ", DTypeName(target), " has ",
                     target.bits / 8, " bytes, ", DTypeName(dtype_), " has ", dtype_.bits / 8)));
  }
  auto view = std::make_unique<PyTensor>(client_, RetainLease(), info_, /*created=*/false, drop_);
  view->dtype_ = target;
  view->writable_ = writable_;
  return view;
}

namespace {

// Whether this process's torch speaks kDLBool through DLPack (2.x does; 1.13 rejects it), asked
// once, of torch itself rather than of its version number. Called with the GIL held.
bool TorchTakesDLBool(const py::module_& torch) {
  static const bool takes = [&] {
    try {
      py::module_::import("torch.utils.dlpack")
          .attr("to_dlpack")(torch.attr("zeros")(1, py::arg("dtype") = torch.attr("bool")));
      return true;
    } catch (const py::error_already_set&) {
      return false;
    }
  }();
  return takes;
}

}  // namespace

py::object PyTensor::Torch() {
  py::module_ torch = py::module_::import("torch");
  if (dtype_.code == kDLBool && !TorchTakesDLBool(torch)) {
    // Take the bytes, call them bool: the same pages, no copy.
    std::unique_ptr<PyTensor> bytes = View(py::str("uint8"));
    py::object as_bytes = torch.attr("from_dlpack")(py::cast(std::move(bytes)));
    return as_bytes.attr("view")(torch.attr("bool"));
  }
  return torch.attr("from_dlpack")(py::cast(this, py::return_value_policy::reference));
}

void PyTensor::Seal(py::object stream) {
  Handle handle = LiveHandle();
  SealOptions options;
  if (!IsNone(stream)) options.cuda_stream = StreamFromPython(stream);
  if (!created_) {
    throw StatusError(absl::FailedPreconditionError(absl::StrCat(
        "tensor '", info_->name, "' is not an unsealed tensor from create(); nothing to seal")));
  }
  const std::string name = info_->name;  // info_ may change under another thread's Seal
  absl::StatusOr<TensorInfo> sealed;
  {
    GilReleased released;
    sealed = client_->Seal(name, options);
  }
  info_ = std::make_shared<const TensorInfo>(ValueOrThrow(std::move(sealed)));
  created_ = false;
  writable_ = info_->is_mutable;
}

void PyTensor::Abort() {
  LiveHandle();
  if (!created_) {
    throw StatusError(absl::FailedPreconditionError(absl::StrCat(
        "tensor '", info_->name, "' is not an unsealed tensor from create(); nothing to abort")));
  }
  const std::string name = info_->name;
  absl::Status status;
  {
    GilReleased released;
    status = client_->Abort(name);
  }
  ThrowIfError(status);
  created_ = false;
  Release();
}

std::string PyTensor::Repr() const {
  std::string state = released()  ? "released"
                      : created_  ? "unsealed, writable"
                      : writable_ ? "mutable"
                                  : "read-only";
  return absl::StrCat("<tensorbroker.Tensor '", info_->name, "' ", DTypeName(dtype_), "[",
                      absl::StrJoin(info_->shape, ", "), "] version ", info_->version, ", ", state,
                      ">");
}

}  // namespace tensorbroker::python
