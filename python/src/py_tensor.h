// tensorbroker.Tensor: one lease on a broker tensor, from Client.get() (read-only unless the
// tensor is mutable) or Client.create() (writable until seal()). NumPy and PyTorch reach its
// memory without a copy through __dlpack__ and __array__; every capsule and every array made
// from it holds its own reference to the client's lease, so they stay valid after release() or
// garbage collection of this object.
//
// CUDA tensors export as kDLCUDA on this process's ordinal of the GPU. Pinned (page-locked) CPU
// tensors export as kDLCPU, because PyTorch and NumPy take no kDLCUDAHost capsules; PyTorch still
// sees them as pinned (Tensor.is_pinned()), so .to("cuda", non_blocking=True) is asynchronous.
//
// Threading: methods run with the GIL held and release it around broker round trips; the
// lease handle is shared with those calls, so release() from another thread meanwhile is safe.
#ifndef TENSORBROKER_PYTHON_SRC_PY_TENSOR_H_
#define TENSORBROKER_PYTHON_SRC_PY_TENSOR_H_

#include <dlpack/dlpack.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <optional>
#include <string>

#include "python/src/lease_drop.h"
#include "tensorbroker/client.h"

namespace tensorbroker::python {

class PyTensor {
 public:
  using Handle = std::shared_ptr<DLManagedTensorVersioned>;

  // `created`: the tensor came from Client.create() and is not sealed yet. `drop`: how the
  // lease is let go of (lease_drop.h; by default without the GIL).
  PyTensor(std::shared_ptr<Client> client, TensorPtr lease, std::shared_ptr<const TensorInfo> info,
           bool created, LeaseDrop drop = LeaseDrop());
  // A tensor the client did not make (a stream's loan or frame): exports share `lease` itself
  // rather than asking the client for another reference (Client::Retain).
  static std::unique_ptr<PyTensor> Standalone(std::shared_ptr<Client> client, TensorPtr lease,
                                              TensorInfo info);
  ~PyTensor();
  PyTensor(const PyTensor&) = delete;
  PyTensor& operator=(const PyTensor&) = delete;

  const TensorInfo& info() const { return *info_; }
  DLDataType dtype() const { return dtype_; }
  bool writable() const { return writable_; }
  bool created() const { return created_; }
  bool released() const { return handle_ == nullptr; }
  // Where the bytes are: "cpu", "cuda:N" (this process's ordinal) or "cuda_host" (pinned).
  std::string device() const;
  bool pinned() const { return device_.device_type == kDLCUDAHost; }

  pybind11::object DLPack(pybind11::object stream, pybind11::object max_version,
                          pybind11::object dl_device, pybind11::object copy);
  pybind11::tuple DLPackDevice() const;
  pybind11::object Array(pybind11::object dtype, pybind11::object copy);
  // Same bytes seen as another dtype of the same item size, with its own reference to the lease.
  std::unique_ptr<PyTensor> View(pybind11::handle dtype);
  pybind11::object Torch();

  // `stream`: None (wait for all work on the tensor's GPU), or the stream the producer wrote on.
  void Seal(pybind11::object stream);
  void Abort();
  void Release();
  std::string Repr() const;

 private:
  // The live handle, or FAILED_PRECONDITION naming the tensor when released.
  Handle LiveHandle() const;
  // Another reference to this client's lease on the same tensor (local, no round trip).
  TensorPtr RetainLease() const;
  // The device exports show: the lease's, with pinned memory shown as kDLCPU.
  DLDevice ExportDevice() const;

  std::shared_ptr<Client> client_;
  LeaseDrop drop_;  // how handle_ and every export of it let go of the lease
  Handle handle_;
  std::shared_ptr<const TensorInfo> info_;  // never null; replaced (not changed) by Seal
  DLDataType dtype_{};
  DLDevice device_{kDLCPU, 0};  // of the lease's DLTensor: as this process sees it
  bool writable_ = false;
  bool created_ = false;
  bool standalone_ = false;  // Standalone(): exports share handle_
};

}  // namespace tensorbroker::python

#endif  // TENSORBROKER_PYTHON_SRC_PY_TENSOR_H_
