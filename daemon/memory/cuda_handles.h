// How a GPU's slabs reach consumers (--cuda-handles, and Stats' "handles" of each CUDA pool):
// POSIX descriptors of CUDA VMM allocations, handed over on the local channel like memfds, or
// legacy CUDA IPC handles (64-byte bearer tokens in the grant). Values only.
#ifndef TENSORBROKER_DAEMON_CUDA_HANDLES_H_
#define TENSORBROKER_DAEMON_CUDA_HANDLES_H_

namespace tensorbroker::daemon {

enum class CudaHandles { kLegacyIpc, kVmm };

// "cuda-vmm" or "cuda-ipc".
inline const char* CudaHandlesName(CudaHandles handles) {
  return handles == CudaHandles::kVmm ? "cuda-vmm" : "cuda-ipc";
}

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_CUDA_HANDLES_H_
