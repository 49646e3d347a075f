#include "common/cuda_vmm.h"

#include <fcntl.h>

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "common/cuda_devices.h"

#ifdef TENSORBROKER_HAVE_CUDA
#include "common/cuda_driver.h"
#endif

namespace tensorbroker {

std::string DescribeCudaVmm(const CudaVmmSupport& support) {
  if (support.usable()) {
    return absl::StrCat("VMM with POSIX descriptors, ", FormatByteSize(support.granularity),
                        " granularity");
  }
  if (!support.vmm) return "no virtual memory management (VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED 0)";
  if (!support.posix_fd) {
    return "VMM without POSIX descriptors (HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED 0)";
  }
  return "VMM without an allocation granularity";
}

// Moves, for both builds (the destructor and Reset release what there is).
CudaAllocation::CudaAllocation(CudaAllocation&& other) noexcept
    : handle_(std::exchange(other.handle_, 0)) {}

CudaAllocation& CudaAllocation::operator=(CudaAllocation&& other) noexcept {
  std::swap(handle_, other.handle_);  // ours goes with `other`
  return *this;
}

CudaMapping::CudaMapping(CudaMapping&& other) noexcept
    : address_(std::exchange(other.address_, 0)),
      size_(other.size_),
      ordinal_(other.ordinal_),
      access_(other.access_) {}

CudaMapping& CudaMapping::operator=(CudaMapping&& other) noexcept {
  if (this != &other) {
    Reset();
    address_ = std::exchange(other.address_, 0);
    size_ = other.size_;
    ordinal_ = other.ordinal_;
    access_ = other.access_;
  }
  return *this;
}

CudaMapping::~CudaMapping() { Reset(); }

#ifndef TENSORBROKER_HAVE_CUDA

namespace {
absl::Status NoCuda() {
  auto devices = CudaDevices();
  return devices.ok() ? absl::FailedPreconditionError("this build has no CUDA support")
                      : devices.status();
}
}  // namespace

absl::StatusOr<CudaVmmSupport> QueryCudaVmm(int) { return NoCuda(); }
absl::StatusOr<CudaAllocation> CudaAllocation::Create(int, uint64_t) { return NoCuda(); }
absl::StatusOr<CudaAllocation> CudaAllocation::Import(int) { return NoCuda(); }
CudaAllocation::~CudaAllocation() = default;
absl::StatusOr<UniqueFd> CudaAllocation::Export() const { return NoCuda(); }
absl::StatusOr<CudaMapping> CudaMapping::Map(const CudaAllocation&, uint64_t, int, CudaAccess) {
  return NoCuda();
}
void CudaMapping::Reset() {}

#else  // TENSORBROKER_HAVE_CUDA

namespace {

// The driver calls of the VMM API, found once through the runtime.
struct VmmCalls {
  decltype(&cuDeviceGet) device_get = nullptr;
  decltype(&cuDeviceGetAttribute) device_attribute = nullptr;
  decltype(&cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&cuMemCreate) create = nullptr;
  decltype(&cuMemRelease) release = nullptr;
  decltype(&cuMemExportToShareableHandle) export_handle = nullptr;
  decltype(&cuMemImportFromShareableHandle) import_handle = nullptr;
  decltype(&cuMemAddressReserve) reserve = nullptr;
  decltype(&cuMemAddressFree) unreserve = nullptr;
  decltype(&cuMemMap) map = nullptr;
  decltype(&cuMemUnmap) unmap = nullptr;
  decltype(&cuMemSetAccess) set_access = nullptr;
  bool complete = false;
};

template <typename F>
bool Find(const char* symbol, F* function) {
  *function = reinterpret_cast<F>(CudaDriverEntryPoint(symbol));
  return *function != nullptr;
}

const VmmCalls& Calls() {
  static const VmmCalls calls = [] {
    VmmCalls c;
    c.complete = Find("cuDeviceGet", &c.device_get) &&
                 Find("cuDeviceGetAttribute", &c.device_attribute) &&
                 Find("cuMemGetAllocationGranularity", &c.granularity) &&
                 Find("cuMemCreate", &c.create) && Find("cuMemRelease", &c.release) &&
                 Find("cuMemExportToShareableHandle", &c.export_handle) &&
                 Find("cuMemImportFromShareableHandle", &c.import_handle) &&
                 Find("cuMemAddressReserve", &c.reserve) &&
                 Find("cuMemAddressFree", &c.unreserve) && Find("cuMemMap", &c.map) &&
                 Find("cuMemUnmap", &c.unmap) && Find("cuMemSetAccess", &c.set_access);
    return c;
  }();
  return calls;
}

// OK when CUDA is usable and the driver has every VMM call; the calls then.
absl::StatusOr<const VmmCalls*> Usable() {
  auto devices = CudaDevices();
  if (!devices.ok()) return devices.status();
  if (!Calls().complete) {
    return absl::FailedPreconditionError(
        "the CUDA driver lacks the virtual memory management calls (cuMemCreate and others)");
  }
  return &Calls();
}

// The device location of `ordinal`, with the properties of an exportable allocation on it.
absl::StatusOr<CUmemAllocationProp> AllocationProperties(const VmmCalls& calls, int ordinal) {
  CUdevice device = 0;
  if (CUresult e = calls.device_get(&device, ordinal); e != CUDA_SUCCESS) {
    return CudaDriverFailed(absl::StrCat("cuDeviceGet(", ordinal, ")"), e);
  }
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

// The VMM calls with device `ordinal` current (until `scoped` goes) and the properties of an
// exportable allocation on it.
struct OnDevice {
  const VmmCalls* calls = nullptr;
  std::unique_ptr<ScopedCudaDevice> scoped;
  CUmemAllocationProp prop{};
};

absl::StatusOr<OnDevice> EnterDevice(int ordinal) {
  auto calls = Usable();
  if (!calls.ok()) return calls.status();
  OnDevice on;
  on.calls = *calls;
  on.scoped = std::make_unique<ScopedCudaDevice>(ordinal);
  if (absl::Status s = on.scoped->status(); !s.ok()) return s;
  auto prop = AllocationProperties(**calls, ordinal);
  if (!prop.ok()) return prop.status();
  on.prop = *prop;
  return on;
}

}  // namespace

absl::StatusOr<CudaVmmSupport> QueryCudaVmm(int ordinal) {
  auto on = EnterDevice(ordinal);
  if (!on.ok()) return on.status();
  const VmmCalls* calls = on->calls;
  int vmm = 0;
  int posix_fd = 0;
  const CUdevice device = on->prop.location.id;
  if (CUresult e = calls->device_attribute(
          &vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device);
      e != CUDA_SUCCESS) {
    return CudaDriverFailed("cuDeviceGetAttribute(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)", e);
  }
  if (CUresult e = calls->device_attribute(
          &posix_fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, device);
      e != CUDA_SUCCESS) {
    return CudaDriverFailed("cuDeviceGetAttribute(HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED)", e);
  }
  CudaVmmSupport support;
  support.vmm = vmm != 0;
  support.posix_fd = posix_fd != 0;
  if (support.vmm && support.posix_fd) {
    size_t granularity = 0;
    if (CUresult e = calls->granularity(&granularity, &on->prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
        e != CUDA_SUCCESS) {
      return CudaDriverFailed("cuMemGetAllocationGranularity", e);
    }
    support.granularity = granularity;
  }
  return support;
}

absl::StatusOr<CudaAllocation> CudaAllocation::Create(int ordinal, uint64_t bytes) {
  auto on = EnterDevice(ordinal);
  if (!on.ok()) return on.status();
  CUmemGenericAllocationHandle handle = 0;
  if (CUresult e = on->calls->create(&handle, bytes, &on->prop, 0); e != CUDA_SUCCESS) {
    return CudaDriverFailed(
        absl::StrCat("cuMemCreate(", bytes, " bytes on CUDA device ", ordinal, ")"), e);
  }
  return CudaAllocation(handle);
}

absl::StatusOr<CudaAllocation> CudaAllocation::Import(int fd) {
  auto calls = Usable();
  if (!calls.ok()) return calls.status();
  CUmemGenericAllocationHandle handle = 0;
  // The driver reads the descriptor's number from the pointer's value.
  if (CUresult e = (*calls)->import_handle(&handle, reinterpret_cast<void*>(uintptr_t{0} + fd),
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
      e != CUDA_SUCCESS) {
    return CudaDriverFailed(absl::StrCat("cuMemImportFromShareableHandle(descriptor ", fd, ")"), e);
  }
  return CudaAllocation(handle);
}

CudaAllocation::~CudaAllocation() {
  if (handle_ != 0) Calls().release(handle_);
}

absl::StatusOr<UniqueFd> CudaAllocation::Export() const {
  auto calls = Usable();
  if (!calls.ok()) return calls.status();
  int fd = -1;
  if (CUresult e =
          (*calls)->export_handle(&fd, handle_, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
      e != CUDA_SUCCESS) {
    return CudaDriverFailed("cuMemExportToShareableHandle", e);
  }
  UniqueFd exported(fd);
  // The driver's descriptor may lack close-on-exec; no child the process starts gets it.
  if (::fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) {
    return absl::InternalError("fcntl(FD_CLOEXEC) on an exported CUDA allocation failed");
  }
  return exported;
}

absl::StatusOr<CudaMapping> CudaMapping::Map(const CudaAllocation& allocation, uint64_t size,
                                             int ordinal, CudaAccess access) {
  auto calls = Usable();
  if (!calls.ok()) return calls.status();
  ScopedCudaDevice scoped(ordinal);
  if (absl::Status s = scoped.status(); !s.ok()) return s;
  CUdeviceptr address = 0;
  if (CUresult e = (*calls)->reserve(&address, size, 0, 0, 0); e != CUDA_SUCCESS) {
    return CudaDriverFailed(absl::StrCat("cuMemAddressReserve(", size, " bytes)"), e);
  }
  CudaMapping mapping(static_cast<uintptr_t>(address), size, ordinal, access);
  if (CUresult e = (*calls)->map(address, size, 0, allocation.handle(), 0); e != CUDA_SUCCESS) {
    (*calls)->unreserve(address, size);
    mapping.address_ = 0;
    return CudaDriverFailed(absl::StrCat("cuMemMap(", size, " bytes)"), e);
  }
  CUdevice device = 0;
  if (CUresult e = (*calls)->device_get(&device, ordinal); e != CUDA_SUCCESS) {
    return CudaDriverFailed(absl::StrCat("cuDeviceGet(", ordinal, ")"), e);
  }
  CUmemAccessDesc desc{};
  desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  desc.location.id = device;
  desc.flags = access == CudaAccess::kReadOnly ? CU_MEM_ACCESS_FLAGS_PROT_READ
                                               : CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (CUresult e = (*calls)->set_access(address, size, &desc, 1); e != CUDA_SUCCESS) {
    absl::Status failed =
        CudaDriverFailed(absl::StrCat("cuMemSetAccess(",
                                      access == CudaAccess::kReadOnly ? "read-only" : "read-write",
                                      ", CUDA device ", ordinal, ")"),
                         e);
    if (access == CudaAccess::kReadOnly && absl::IsInvalidArgument(failed)) {
      // Devices that map device memory read-write only answer INVALID_VALUE or NOT_SUPPORTED.
      failed = absl::FailedPreconditionError(failed.message());
    }
    return failed;  // `mapping` unmaps and unreserves
  }
  return mapping;
}

void CudaMapping::Reset() {
  if (address_ == 0) return;
  const VmmCalls& calls = Calls();
  ScopedCudaDevice scoped(ordinal_);
  calls.unmap(static_cast<CUdeviceptr>(address_), size_);
  calls.unreserve(static_cast<CUdeviceptr>(address_), size_);
  address_ = 0;
}

#endif  // TENSORBROKER_HAVE_CUDA

}  // namespace tensorbroker
