// A Python object's CPU memory seen as a DLTensor, for Client.put(): through `__dlpack__`
// (NumPy, PyTorch, anything speaking DLPack) or else the buffer protocol (bytes, array.array,
// and the NumPy arrays NumPy 1.24 will not export through DLPack: read-only and bool ones).
//
// Ownership: holds whatever keeps that memory valid (the producer's DLPack tensor, whose deleter
// it calls, or a Py_buffer it releases). Create and destroy it with the GIL held; the memory may
// be read without the GIL in between.
#ifndef TENSORBROKER_PYTHON_SRC_SOURCE_VIEW_H_
#define TENSORBROKER_PYTHON_SRC_SOURCE_VIEW_H_

#include <dlpack/dlpack.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace tensorbroker::python {

class SourceView {
 public:
  // Throws StatusError(INVALID_ARGUMENT) naming `field` for memory the broker cannot take
  // (not on the CPU, unknown dtype), TypeError for an object that is no tensor at all.
  static std::unique_ptr<SourceView> Of(pybind11::handle object, const char* field = "obj");
  ~SourceView();
  SourceView(const SourceView&) = delete;
  SourceView& operator=(const SourceView&) = delete;

  const DLTensor& tensor() const { return tensor_; }

 private:
  SourceView() = default;
  void TakeCapsule(pybind11::handle capsule, const char* field);
  void TakeBuffer(pybind11::handle object, const char* field);

  DLTensor tensor_{};
  DLManagedTensor* legacy_ = nullptr;              // consumed capsule (pre-1.0 ABI)
  DLManagedTensorVersioned* versioned_ = nullptr;  // consumed capsule (DLPack >= 1.0)
  std::unique_ptr<Py_buffer> buffer_;              // filled by PyObject_GetBuffer
  std::vector<int64_t> shape_;
  std::vector<int64_t> strides_;
  pybind11::object keepalive_;  // an intermediate object (a torch view) the memory belongs to
};

}  // namespace tensorbroker::python

#endif  // TENSORBROKER_PYTHON_SRC_SOURCE_VIEW_H_
