// One slab of CUDA device memory owned by the daemon, on one device, and how consumers reach it.
// Two kinds, chosen per device at start (--cuda-handles, cuda_slab_pool.h):
//  - VMM (VmmCudaSlab): made with cuMemCreate, mapped read-write in the daemon for its copies,
//    exported once as a POSIX descriptor that travels on the local channel like a memfd. The
//    descriptor keeps the memory while any process (the service manager's store included)
//    holds it, so a slab can outlive the daemon that made it (Adopt).
//  - Legacy CUDA IPC (LegacyCudaSlab): cudaMalloc'd, exported once as a 64-byte
//    cudaIpcMemHandle_t that travels in the grant; the memory dies with the daemon.
// Either way one export maps the whole allocation, so consumers address a tensor in it as
// (slab, offset).
//
// Ownership: the memory is released on destruction (for VMM: the daemon's mapping, handle and
// descriptor; the memory itself once no other process holds a descriptor or mapping). Destroy a
// slab only when no lease on any tensor in it remains. Not thread-safe. Built only with CUDA
// support (TENSORBROKER_HAVE_CUDA).
#ifndef TENSORBROKER_DAEMON_CUDA_SLAB_H_
#define TENSORBROKER_DAEMON_CUDA_SLAB_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/cuda_vmm.h"
#include "common/unique_fd.h"
#include "daemon/memory/cuda_handles.h"

namespace tensorbroker::daemon {

class CudaSlab {
 public:
  virtual ~CudaSlab() = default;
  uint8_t* data() const { return data_; }  // a device pointer, in the daemon's context
  uint64_t size() const { return size_; }
  int ordinal() const { return ordinal_; }
  virtual CudaHandles handles() const = 0;
  // Legacy: the slab's cudaIpcMemHandle_t (64 bytes), as it travels on the wire. VMM: empty.
  virtual const std::string& ipc_handle() const = 0;
  // VMM: the exported descriptor, owned by the slab (-1 for legacy).
  virtual int fd() const = 0;

 protected:
  CudaSlab(int ordinal, uint8_t* data, uint64_t size)
      : ordinal_(ordinal), data_(data), size_(size) {}
  CudaSlab(const CudaSlab&) = delete;
  CudaSlab& operator=(const CudaSlab&) = delete;

 private:
  int ordinal_;
  uint8_t* data_;
  uint64_t size_;
};

class LegacyCudaSlab final : public CudaSlab {
 public:
  // Slab sizes are multiples of this (CUDA IPC works best on 2 MiB-aligned allocations).
  static constexpr uint64_t kGranularity = 2ull << 20;

  // `bytes` is rounded up to kGranularity. RESOURCE_EXHAUSTED when the device is out of memory.
  static absl::StatusOr<std::unique_ptr<CudaSlab>> Allocate(int ordinal, uint64_t bytes);
  ~LegacyCudaSlab() override;

  CudaHandles handles() const override { return CudaHandles::kLegacyIpc; }
  const std::string& ipc_handle() const override { return ipc_handle_; }
  int fd() const override { return -1; }

 private:
  LegacyCudaSlab(int ordinal, uint8_t* data, uint64_t size, std::string ipc_handle)
      : CudaSlab(ordinal, data, size), ipc_handle_(std::move(ipc_handle)) {}
  std::string ipc_handle_;
};

class VmmCudaSlab final : public CudaSlab {
 public:
  // `bytes` (a multiple of the device's granularity, CudaVmmSupport) of new device memory.
  // RESOURCE_EXHAUSTED when the device is out of memory.
  static absl::StatusOr<std::unique_ptr<CudaSlab>> Allocate(int ordinal, uint64_t bytes);
  // The slab a previous instance made and exported as `fd` (handed back by the service manager
  // or a daemon taken over), `bytes` long, mapped again here. INVALID_ARGUMENT when `fd` is not
  // such a descriptor or the allocation is shorter.
  static absl::StatusOr<std::unique_ptr<CudaSlab>> Adopt(int ordinal, UniqueFd fd, uint64_t bytes);

  CudaHandles handles() const override { return CudaHandles::kVmm; }
  const std::string& ipc_handle() const override { return no_ipc_handle_; }
  int fd() const override { return fd_.get(); }

 private:
  VmmCudaSlab(int ordinal, CudaMapping mapping, UniqueFd fd);
  static absl::StatusOr<std::unique_ptr<CudaSlab>> MapExported(int ordinal,
                                                               const CudaAllocation& allocation,
                                                               UniqueFd fd, uint64_t bytes);
  CudaMapping mapping_;  // read-write, for the daemon's copies; keeps the memory
  UniqueFd fd_;          // the one export: what consumers and the descriptor store get (dups)
  const std::string no_ipc_handle_;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_CUDA_SLAB_H_
