#include "python/src/source_view.h"

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "python/src/status_error.h"

namespace tensorbroker::python {

namespace py = pybind11;

namespace {

[[noreturn]] void Invalid(const char* field, absl::string_view what) {
  throw StatusError(absl::InvalidArgumentError(absl::StrCat(field, ": ", what)));
}

// torch.Tensor and its subclasses (nn.Parameter, ...); torch is imported only if the caller
// already did, as it must have to make one.
bool IsTorchTensor(py::handle object) {
  py::dict modules = py::module_::import("sys").attr("modules");
  if (!modules.contains("torch")) return false;
  return py::isinstance(object, modules["torch"].attr("Tensor"));
}

// The DLPack dtype of a buffer-protocol format string ("f", "<d", "?", "Zf", ...).
DLDataType DTypeOfFormat(absl::string_view format, Py_ssize_t itemsize, const char* field) {
  if (!format.empty() && (format[0] == '@' || format[0] == '=' || format[0] == '<')) {
    format.remove_prefix(1);
  } else if (!format.empty() && (format[0] == '>' || format[0] == '!') && itemsize > 1) {
    Invalid(field, absl::StrCat("big-endian buffer format '", format, "' is not supported"));
  } else if (!format.empty() && (format[0] == '>' || format[0] == '!')) {
    format.remove_prefix(1);
  }
  const uint8_t bits = static_cast<uint8_t>(itemsize * 8);
  if (format == "?") return {kDLBool, 8, 1};
  if (format == "e" || format == "f" || format == "d") return {kDLFloat, bits, 1};
  if (format == "Zf" || format == "Zd") return {kDLComplex, bits, 1};
  if (format.size() == 1 &&
      absl::string_view("bhilqn").find(format[0]) != absl::string_view::npos) {
    return {kDLInt, bits, 1};
  }
  if (format.size() == 1 &&
      absl::string_view("BHILQN").find(format[0]) != absl::string_view::npos) {
    return {kDLUInt, bits, 1};
  }
  Invalid(field, absl::StrCat("buffer format '", format,
                              "' is not a numeric type the broker "
                              "knows (bool, int, uint, float or complex)"));
}

// `with torch.cuda.device(ordinal):` for the lifetime of this object.
class TorchDeviceGuard {
 public:
  explicit TorchDeviceGuard(int ordinal)
      : context_(py::module_::import("torch").attr("cuda").attr("device")(ordinal)) {
    context_.attr("__enter__")();
  }
  ~TorchDeviceGuard() {
    try {
      context_.attr("__exit__")(py::none(), py::none(), py::none());
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable("tensorbroker: leaving torch.cuda.device");
    }
  }
  TorchDeviceGuard(const TorchDeviceGuard&) = delete;
  TorchDeviceGuard& operator=(const TorchDeviceGuard&) = delete;

 private:
  py::object context_;
};

}  // namespace

std::unique_ptr<SourceView> SourceView::Of(py::handle object, const char* field) {
  std::unique_ptr<SourceView> view(new SourceView());
  py::object source = py::reinterpret_borrow<py::object>(object);
  bool is_bool = false;
  if (IsTorchTensor(source)) {
    // A copy into the broker has no autograd meaning; torch refuses to export these as they are.
    if (source.attr("requires_grad").cast<bool>()) source = source.attr("detach")();
    if (source.attr("is_conj")().cast<bool>()) source = source.attr("resolve_conj")();
    if (source.attr("is_neg")().cast<bool>()) source = source.attr("resolve_neg")();
    // torch 1.13 cannot export bool through DLPack: export its bytes, then call them bool.
    if (std::string(py::str(source.attr("dtype"))) == "torch.bool") {
      source = source.attr("view")(py::module_::import("torch").attr("uint8"));
      is_bool = true;
    }
    view->keepalive_ = source;
  }
  if (py::hasattr(source, "__dlpack__")) {
    bool cuda = false;
    std::optional<TorchDeviceGuard> on_its_device;
    if (py::hasattr(source, "__dlpack_device__")) {
      py::tuple device = source.attr("__dlpack_device__")();
      const int type = device[0].cast<int>();
      if (type != kDLCPU && type != kDLCUDAHost && type != kDLCUDA) {
        Invalid(field, absl::StrCat("the tensor is on DLPack device type ", type,
                                    "; put() takes CPU or CUDA memory"));
      }
      cuda = type == kDLCUDA;
      // torch exports a CUDA tensor only while its device is the current one.
      if (cuda && IsTorchTensor(source)) on_its_device.emplace(device[1].cast<int>());
    }
    // CUDA: the broker copies on the legacy default stream; stream=1 asks the producer to order
    // its pending work before that stream (DLPack's protocol).
    py::dict kwargs;
    if (cuda) kwargs["stream"] = 1;
    py::object capsule;
    try {
      try {
        kwargs["max_version"] = py::make_tuple(1, 0);
        capsule = source.attr("__dlpack__")(**kwargs);
      } catch (py::error_already_set& e) {
        if (!e.matches(PyExc_TypeError)) throw;  // a producer without max_version (NumPy 1.24)
        PyDict_DelItemString(kwargs.ptr(), "max_version");
        capsule = source.attr("__dlpack__")(**kwargs);
      }
    } catch (py::error_already_set& e) {
      // NumPy 1.24 refuses read-only and bool arrays; its buffer protocol takes both.
      if (!e.matches(PyExc_BufferError) || !PyObject_CheckBuffer(source.ptr())) throw;
      view->TakeBuffer(source, field);
      return view;
    }
    view->TakeCapsule(capsule, field);
    if (is_bool) view->tensor_.dtype = {kDLBool, 8, 1};
    return view;
  }
  if (PyObject_CheckBuffer(source.ptr())) {
    view->TakeBuffer(source, field);
    return view;
  }
  throw py::type_error(
      absl::StrCat(field,
                   ": expected an object with __dlpack__ (numpy.ndarray, torch.Tensor, ...) or the "
                   "buffer protocol, got ",
                   std::string(py::str(py::type::handle_of(object).attr("__name__")))));
}

void SourceView::TakeCapsule(py::handle capsule, const char* field) {
  PyObject* raw = capsule.ptr();
  if (PyCapsule_IsValid(raw, "dltensor_versioned")) {
    versioned_ =
        static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(raw, "dltensor_versioned"));
    PyCapsule_SetName(raw, "used_dltensor_versioned");  // ours now: the capsule must not delete
    if (versioned_->version.major != DLPACK_MAJOR_VERSION) {
      Invalid(field,
              absl::StrCat("DLPack ", versioned_->version.major, ".", versioned_->version.minor,
                           " tensor; this build reads ", DLPACK_MAJOR_VERSION, ".x"));
    }
    tensor_ = versioned_->dl_tensor;
  } else if (PyCapsule_IsValid(raw, "dltensor")) {
    legacy_ = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(raw, "dltensor"));
    PyCapsule_SetName(raw, "used_dltensor");
    tensor_ = legacy_->dl_tensor;
  } else {
    Invalid(field, "__dlpack__() returned no unused \"dltensor\" capsule");
  }
}

void SourceView::TakeBuffer(py::handle object, const char* field) {
  buffer_ = std::make_unique<Py_buffer>();
  if (PyObject_GetBuffer(object.ptr(), buffer_.get(), PyBUF_STRIDES | PyBUF_FORMAT) != 0) {
    buffer_.reset();
    throw py::error_already_set();
  }
  const Py_buffer& b = *buffer_;
  tensor_.dtype = DTypeOfFormat(b.format != nullptr ? b.format : "B", b.itemsize, field);
  tensor_.data = b.buf;
  tensor_.device = {kDLCPU, 0};
  tensor_.ndim = b.ndim;
  shape_.assign(b.shape, b.shape + b.ndim);
  strides_.resize(static_cast<size_t>(b.ndim));
  int64_t compact = 1;
  for (int i = b.ndim - 1; i >= 0; --i) {
    if (b.strides == nullptr) {
      strides_[i] = compact;
      compact *= shape_[i];
    } else if (b.strides[i] % b.itemsize != 0) {
      Invalid(field, absl::StrCat("stride ", b.strides[i], " of dimension ", i,
                                  " is not a multiple of the item size ", b.itemsize));
    } else {
      strides_[i] = b.strides[i] / b.itemsize;
    }
  }
  tensor_.shape = shape_.data();
  tensor_.strides = strides_.data();
}

SourceView::~SourceView() {
  if (legacy_ != nullptr && legacy_->deleter != nullptr) legacy_->deleter(legacy_);
  if (versioned_ != nullptr && versioned_->deleter != nullptr) versioned_->deleter(versioned_);
  if (buffer_ != nullptr) PyBuffer_Release(buffer_.get());
}

}  // namespace tensorbroker::python
