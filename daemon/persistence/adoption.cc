#include "daemon/persistence/adoption.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/wire/proto_convert.h"
#include "daemon/base/log.h"
#include "daemon/persistence/fd_store_journal.h"
#include "daemon/persistence/tensor_record.h"
#include "daemon/wire/request_spec.h"
#include "tensorbroker/dtype_names.h"

namespace tensorbroker::daemon {
namespace {

constexpr absl::string_view kSegmentPrefix = "s-";
constexpr absl::string_view kCudaSlabPrefix = "g-";
constexpr absl::string_view kRecordPrefix = "r-";

// A record turned into what the store adopts, every field checked as a client's would be (a
// CUDA device must name, by UUID, a GPU this instance sees).
absl::StatusOr<TensorStore::AdoptedTensor> ToAdopted(const v1::TensorRecord& record) {
  const v1::TensorInfo& info = record.info();
  const int32_t device_type = info.device().device_type();
  if (device_type != 0 && device_type != kDLCPU && device_type != kDLCUDA) {
    return absl::InvalidArgumentError(absl::StrCat("device type ", device_type));
  }
  auto spec = MakeSpec(info.name(), info.dtype(), info.shape(), info.strides(), info.nbytes(),
                       info.mutable_(), /*replace=*/false, /*has_device=*/device_type == kDLCUDA,
                       info.device());
  if (!spec.ok()) return spec.status();
  auto readers = PrincipalSet::Parse({info.readers().begin(), info.readers().end()}, "readers");
  if (!readers.ok()) return readers.status();
  if (info.version() == 0) return absl::InvalidArgumentError("version 0");
  if (info.keep() > kMaxKeep) {
    return absl::InvalidArgumentError(absl::StrCat("keep ", info.keep(), " is over ", kMaxKeep));
  }
  if (record.block_size() < spec->nbytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a block of ", record.block_size(), " bytes cannot hold ", spec->nbytes));
  }
  TensorStore::AdoptedTensor adopted;
  adopted.spec = *std::move(spec);
  adopted.spec.owner_uid = record.publisher_uid();
  adopted.spec.readers = *std::move(readers);
  adopted.spec.keep = std::max<uint32_t>(info.keep(), 1);
  adopted.name_owner = info.owner_uid();
  adopted.version = info.version();
  adopted.created_unix_ms = info.created_unix_ms();
  return adopted;
}

// One adoption: the descriptors sorted by kind, then each name's records adopted into the pools.
class Adopter {
 public:
  Adopter(const std::vector<MemoryPool*>& pools, const FdStore& store)
      : pools_(pools), store_(store) {}

  // Sorts one handed descriptor: a CPU segment is adopted at once, a CUDA slab when a record
  // names it (the record says its size), a record is read; others are kept for the caller.
  void Take(NamedFd named);
  // Each name's versions, highest first: the highest one that checks out is adopted, with as
  // many more as its keep asks for (of the name's owner); the others (out of the history, left
  // by a replace that a kill interrupted, or not valid) are dropped.
  void AdoptRecords();
  // Removes what no adopted tensor lies in, and returns the result.
  Adoption Finish();

 private:
  void Drop(const std::string& fd_name, const std::string& why);
  void AdoptSegmentNow(NamedFd named);
  void ReadRecord(NamedFd named);
  // Adopts one version of a name; false (dropped, with the reason) when it does not check out.
  bool AdoptVersion(const std::string& fd_name, bool first, uint32_t name_owner);
  // The pool the record's tensor lies in, with its CUDA slab adopted first if need be.
  absl::StatusOr<MemoryPool*> PoolOf(const v1::TensorRecord& record, DLDevice device);

  const std::vector<MemoryPool*>& pools_;
  const FdStore& store_;
  Adoption result_;
  std::map<std::string, v1::TensorRecord> records_;  // by descriptor name
  std::map<std::string, UniqueFd> cuda_slabs_;       // "g-" descriptors not adopted, by slab
  std::set<std::string> seen_;                       // segment, slab and record names
  std::set<std::string> segments_used_;
};

void Adopter::Drop(const std::string& fd_name, const std::string& why) {
  Log(LogLevel::kWarning, "adoption: ", LogSafe(fd_name), " dropped: ", why);
  (void)store_.Remove(fd_name);
  if (absl::StartsWith(fd_name, kRecordPrefix)) ++result_.records_dropped;
}

void Adopter::Take(NamedFd named) {
  const bool ours = absl::StartsWith(named.name, kSegmentPrefix) ||
                    absl::StartsWith(named.name, kCudaSlabPrefix) ||
                    absl::StartsWith(named.name, kRecordPrefix);
  if (!ours) {
    result_.others.push_back(std::move(named));
    return;
  }
  if (!seen_.insert(named.name).second) {
    // The store removes by name: dropping this one there would drop the first one too, which
    // may be adopted (and lost at the next start). Only the first is used; this one closes.
    Log(LogLevel::kWarning, "adoption: ", LogSafe(named.name),
        " handed over more than once; only the first is used");
    if (absl::StartsWith(named.name, kRecordPrefix)) ++result_.records_dropped;
    return;
  }
  if (absl::StartsWith(named.name, kSegmentPrefix)) {
    AdoptSegmentNow(std::move(named));
  } else if (absl::StartsWith(named.name, kCudaSlabPrefix)) {
    cuda_slabs_.emplace(named.name.substr(kCudaSlabPrefix.size()), std::move(named.fd));
  } else {
    ReadRecord(std::move(named));
  }
}

void Adopter::AdoptSegmentNow(NamedFd named) {
  const std::string segment = named.name.substr(kSegmentPrefix.size());
  if (absl::Status adopted = pools_.front()->AdoptSegment(segment, std::move(named.fd), 0);
      !adopted.ok()) {
    Drop(named.name, std::string(adopted.message()));
  }
}

void Adopter::ReadRecord(NamedFd named) {
  auto record = ReadTensorRecord(named.fd.get());
  if (!record.ok()) {
    Drop(named.name, std::string(record.status().message()));
  } else if (named.name != RecordFdName(record->info().version())) {
    Drop(named.name, "its name does not match its version");
  } else {
    records_.emplace(named.name, *std::move(record));
  }
}

absl::StatusOr<MemoryPool*> Adopter::PoolOf(const v1::TensorRecord& record, DLDevice device) {
  for (MemoryPool* pool : pools_) {
    const DLDevice served = pool->device();
    if (served.device_type != device.device_type || served.device_id != device.device_id) {
      continue;
    }
    if (device.device_type != kDLCUDA) return pool;
    auto slab = cuda_slabs_.find(record.segment());
    if (slab == cuda_slabs_.end()) return pool;  // adopted already, or never handed over
    UniqueFd fd = std::move(slab->second);
    cuda_slabs_.erase(slab);
    absl::Status adopted =
        pool->AdoptSegment(record.segment(), std::move(fd), record.segment_size());
    if (!adopted.ok()) {
      Drop(CudaSlabFdName(record.segment()), std::string(adopted.message()));
      return adopted;
    }
    return pool;
  }
  return absl::FailedPreconditionError(
      absl::StrCat(DeviceName(device), " is not served by this instance"));
}

bool Adopter::AdoptVersion(const std::string& fd_name, bool first, uint32_t name_owner) {
  const v1::TensorRecord& record = records_.at(fd_name);
  auto adopted = ToAdopted(record);
  if (!adopted.ok()) {
    Drop(fd_name, std::string(adopted.status().message()));
    return false;
  }
  if (!first && adopted->name_owner != name_owner) {
    Drop(fd_name, "the name's owner differs from its newer version's");
    return false;
  }
  auto pool = PoolOf(record, adopted->spec.device);
  absl::StatusOr<Block> block =
      pool.ok() ? (*pool)->AdoptBlock(record.segment(), record.offset(), record.block_size(),
                                      BlockKindOf(adopted->spec), SharingKeyOf(adopted->spec))
                : pool.status();
  if (!block.ok()) {
    Drop(fd_name, std::string(block.status().message()));
    return false;
  }
  adopted->block = *std::move(block);
  result_.bytes += adopted->spec.nbytes;
  if (adopted->block.device.device_type == kDLCUDA) ++result_.cuda_tensors;
  segments_used_.insert(record.segment());
  result_.tensors.push_back(*std::move(adopted));
  return true;
}

void Adopter::AdoptRecords() {
  std::map<std::string, std::map<uint64_t, std::string, std::greater<>>> versions;
  for (const auto& [fd_name, record] : records_) {
    versions[record.info().name()][record.info().version()] = fd_name;
  }
  for (const auto& [name, by_version] : versions) {
    size_t adopted_count = 0;
    uint32_t keep = 1;  // the highest adopted version's
    for (const auto& [version, fd_name] : by_version) {
      if (adopted_count == keep) {
        Drop(fd_name, keep == 1 ? "a higher version of its name was adopted"
                                : absl::StrCat("the name keeps ", keep, " versions, all adopted"));
        continue;
      }
      const bool first = adopted_count == 0;
      const uint32_t name_owner = first ? 0 : result_.tensors.back().name_owner;
      if (!AdoptVersion(fd_name, first, name_owner)) continue;
      if (adopted_count++ == 0) keep = result_.tensors.back().spec.keep;
    }
  }
}

Adoption Adopter::Finish() {
  for (auto& [slab, fd] : cuda_slabs_) Drop(CudaSlabFdName(slab), "no adopted tensor lies in it");
  result_.segments_freed = cuda_slabs_.size();
  cuda_slabs_.clear();  // closed: the memory goes with the store's copy
  result_.segments = segments_used_.size();
  std::vector<std::string> freed;
  for (MemoryPool* pool : pools_) pool->RemoveUnclaimed(&freed);
  result_.segments_freed += freed.size();
  return std::move(result_);
}

}  // namespace

Adoption AdoptStoredDescriptors(std::vector<NamedFd> descriptors,
                                const std::vector<MemoryPool*>& pools, const FdStore& store) {
  Adopter adopter(pools, store);
  for (NamedFd& named : descriptors) adopter.Take(std::move(named));
  adopter.AdoptRecords();
  return adopter.Finish();
}

}  // namespace tensorbroker::daemon
