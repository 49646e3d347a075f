// CUDA device memory as POSIX file descriptors: the driver's virtual memory management (VMM)
// API. The daemon makes each slab with cuMemCreate and exports it once as a descriptor; a client
// (or the daemon after a restart) imports a descriptor it was handed and maps the allocation
// into its own device address space, read-write or read-only.
//
// What the driver enforces: a mapping made read-only (CU_MEM_ACCESS_FLAGS_PROT_READ) faults on
// a device write through it, in the writing process. What it does not: whoever holds the
// descriptor may import it again and map it read-write; the descriptor, like a legacy IPC
// handle, reaches the whole allocation. The physical memory lives while any handle, mapping or
// exported descriptor of it does (cuMemRelease).
//
// Every function works in a build without CUDA support or on a machine without a usable GPU:
// it then answers FAILED_PRECONDITION with the reason. Types are move-only RAII owners, one
// owner each, not thread-safe themselves; the calls may be made from any thread (each makes its
// device current for its duration and restores the thread's context).
#ifndef TENSORBROKER_COMMON_CUDA_VMM_H_
#define TENSORBROKER_COMMON_CUDA_VMM_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/unique_fd.h"

namespace tensorbroker {

// What device `ordinal` offers the descriptor path.
struct CudaVmmSupport {
  bool vmm = false;          // CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
  bool posix_fd = false;     // CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED
  uint64_t granularity = 0;  // allocation sizes are multiples of this (bytes)
  bool usable() const { return vmm && posix_fd && granularity > 0; }
};

// FAILED_PRECONDITION when CUDA is not usable here or the driver lacks the VMM calls.
absl::StatusOr<CudaVmmSupport> QueryCudaVmm(int ordinal);
// The same as one line for logs and errors: "VMM with POSIX descriptors, 2 MiB granularity", or
// what is missing.
std::string DescribeCudaVmm(const CudaVmmSupport& support);

enum class CudaAccess { kReadOnly, kReadWrite };

// One reference to a physical allocation (a CUmemGenericAllocationHandle) held by this process;
// cuMemRelease on destruction.
class CudaAllocation {
 public:
  // `bytes` of device memory on `ordinal`, exportable as a POSIX descriptor; `bytes` must be a
  // multiple of the device's granularity. RESOURCE_EXHAUSTED when the device has no room.
  static absl::StatusOr<CudaAllocation> Create(int ordinal, uint64_t bytes);
  // The allocation a descriptor exported by another process (or this one) names. Does not take
  // `fd`. INVALID_ARGUMENT when it is not such a descriptor.
  static absl::StatusOr<CudaAllocation> Import(int fd);

  CudaAllocation(CudaAllocation&& other) noexcept;
  CudaAllocation& operator=(CudaAllocation&& other) noexcept;
  CudaAllocation(const CudaAllocation&) = delete;
  CudaAllocation& operator=(const CudaAllocation&) = delete;
  ~CudaAllocation();

  // A new descriptor for the allocation (close-on-exec); it keeps the memory while it is open.
  absl::StatusOr<UniqueFd> Export() const;
  unsigned long long handle() const { return handle_; }

 private:
  explicit CudaAllocation(unsigned long long handle) : handle_(handle) {}
  unsigned long long handle_ = 0;  // 0: none (moved from)
};

// One mapping of a whole allocation at an address range reserved for it in this process, usable
// from device `ordinal` as `access`; unmapped and unreserved on destruction. The mapping keeps
// the physical memory (the allocation object may go first).
class CudaMapping {
 public:
  // FAILED_PRECONDITION (the driver's words) when the device refuses `access`, e.g. a read-only
  // mapping on a device that only maps read-write: the caller may map again read-write.
  static absl::StatusOr<CudaMapping> Map(const CudaAllocation& allocation, uint64_t size,
                                         int ordinal, CudaAccess access);

  CudaMapping(CudaMapping&& other) noexcept;
  CudaMapping& operator=(CudaMapping&& other) noexcept;
  CudaMapping(const CudaMapping&) = delete;
  CudaMapping& operator=(const CudaMapping&) = delete;
  ~CudaMapping();

  uint8_t* data() const { return reinterpret_cast<uint8_t*>(address_); }
  uint64_t size() const { return size_; }
  int ordinal() const { return ordinal_; }
  CudaAccess access() const { return access_; }

 private:
  CudaMapping(uintptr_t address, uint64_t size, int ordinal, CudaAccess access)
      : address_(address), size_(size), ordinal_(ordinal), access_(access) {}
  void Reset();
  uintptr_t address_ = 0;  // 0: none (moved from)
  uint64_t size_ = 0;
  int ordinal_ = 0;
  CudaAccess access_ = CudaAccess::kReadWrite;
};

}  // namespace tensorbroker

#endif  // TENSORBROKER_COMMON_CUDA_VMM_H_
