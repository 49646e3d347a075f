#include "common/cuda_driver.h"

#include "absl/strings/str_cat.h"

namespace tensorbroker {

absl::Status CudaRuntimeFailed(const std::string& call, cudaError_t error) {
  (void)cudaGetLastError();  // leave no non-sticky error behind for the next call
  const std::string message =
      absl::StrCat(call, ": ", cudaGetErrorName(error), " (", cudaGetErrorString(error), ")");
  switch (error) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(message);
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidPitchValue:
    case cudaErrorInvalidDevice:
      return absl::InvalidArgumentError(message);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorNotSupported:
    case cudaErrorHostMemoryAlreadyRegistered:
      return absl::FailedPreconditionError(message);
    default:
      return absl::InternalError(message);
  }
}

namespace {

using GetErrorText = CUresult (*)(CUresult, const char**);

std::string DriverErrorText(CUresult error) {
  static const auto name = reinterpret_cast<GetErrorText>(CudaDriverEntryPoint("cuGetErrorName"));
  static const auto text = reinterpret_cast<GetErrorText>(CudaDriverEntryPoint("cuGetErrorString"));
  const char* n = nullptr;
  const char* t = nullptr;
  if (name == nullptr || name(error, &n) != CUDA_SUCCESS || n == nullptr) {
    return absl::StrCat("CUresult ", static_cast<int>(error));
  }
  if (text == nullptr || text(error, &t) != CUDA_SUCCESS || t == nullptr) return n;
  return absl::StrCat(n, " (", t, ")");
}

// The driver's current-context calls; null where the driver lacks them.
struct ContextCalls {
  CUresult (*get)(CUcontext*) = nullptr;
  CUresult (*set)(CUcontext) = nullptr;
};

const ContextCalls& Contexts() {
  static const ContextCalls calls = [] {
    ContextCalls found;
    found.get = reinterpret_cast<CUresult (*)(CUcontext*)>(CudaDriverEntryPoint("cuCtxGetCurrent"));
    found.set = reinterpret_cast<CUresult (*)(CUcontext)>(CudaDriverEntryPoint("cuCtxSetCurrent"));
    if (found.get == nullptr || found.set == nullptr) found = ContextCalls{};
    return found;
  }();
  return calls;
}

}  // namespace

absl::Status CudaDriverFailed(const std::string& call, CUresult error) {
  const std::string message = absl::StrCat(call, ": ", DriverErrorText(error));
  switch (error) {
    case CUDA_ERROR_OUT_OF_MEMORY:
      return absl::ResourceExhaustedError(message);
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_INVALID_HANDLE:
      return absl::InvalidArgumentError(message);
    case CUDA_ERROR_NOT_SUPPORTED:
    case CUDA_ERROR_NOT_PERMITTED:
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
      return absl::FailedPreconditionError(message);
    default:
      return absl::InternalError(message);
  }
}

void* CudaDriverEntryPoint(const char* symbol) {
  void* function = nullptr;
  cudaDriverEntryPointQueryResult result{};
  const cudaError_t error =
      cudaGetDriverEntryPointByVersion(symbol, &function, 12000, cudaEnableDefault, &result);
  (void)cudaGetLastError();
  if (error != cudaSuccess || result != cudaDriverEntryPointSuccess) return nullptr;
  return function;
}

ScopedCudaDevice::ScopedCudaDevice(int ordinal) : ordinal_(ordinal) {
  const ContextCalls& calls = Contexts();
  if (calls.get != nullptr && calls.get(&saved_context_) == CUDA_SUCCESS) know_context_ = true;
  int current = -1;
  const bool has_context = !know_context_ || saved_context_ != nullptr;
  if (has_context && cudaGetDevice(&current) == cudaSuccess && current == ordinal) return;
  previous_ = current;
  status_ = cudaSetDevice(ordinal);
  changed_ = status_ == cudaSuccess;
}

ScopedCudaDevice::~ScopedCudaDevice() {
  if (!changed_) return;
  if (know_context_) {
    Contexts().set(saved_context_);
  } else if (previous_ >= 0) {
    cudaSetDevice(previous_);
  }
}

absl::Status ScopedCudaDevice::status() const {
  if (status_ == cudaSuccess) return absl::OkStatus();
  return CudaRuntimeFailed(absl::StrCat("cudaSetDevice(", ordinal_, ")"), status_);
}

}  // namespace tensorbroker
