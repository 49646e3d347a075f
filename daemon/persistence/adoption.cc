#include "daemon/persistence/adoption.h"

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

namespace tensorbroker::daemon {
namespace {

constexpr absl::string_view kSegmentPrefix = "s-";
constexpr absl::string_view kRecordPrefix = "r-";

// A record turned into what the store adopts, every field checked as a client's would be.
absl::StatusOr<TensorStore::AdoptedTensor> ToAdopted(const v1::TensorRecord& record) {
  const v1::TensorInfo& info = record.info();
  if (info.device().device_type() != 0 && info.device().device_type() != kDLCPU) {
    return absl::InvalidArgumentError("not a CPU tensor");
  }
  auto spec = MakeSpec(info.name(), info.dtype(), info.shape(), info.strides(), info.nbytes(),
                       info.mutable_(), /*replace=*/false, /*has_device=*/false, v1::Device());
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

void Drop(const FdStore& store, const std::string& fd_name, const std::string& why,
          size_t* dropped) {
  Log(LogLevel::kWarning, "adoption: ", LogSafe(fd_name), " dropped: ", why);
  (void)store.Remove(fd_name);
  ++*dropped;
}

// Sorts what was handed over: each segment adopted into `pool` at once (or dropped), each
// record read and returned by descriptor name (or dropped), the rest kept in `result->others`.
std::map<std::string, v1::TensorRecord> SortHanded(std::vector<NamedFd> descriptors,
                                                   CpuSegmentPool* pool, const FdStore& store,
                                                   Adoption* result) {
  std::map<std::string, v1::TensorRecord> records;  // by descriptor name
  std::set<std::string> seen;                       // segment and record names
  for (NamedFd& named : descriptors) {
    const bool segment_or_record =
        absl::StartsWith(named.name, kSegmentPrefix) || absl::StartsWith(named.name, kRecordPrefix);
    if (segment_or_record && !seen.insert(named.name).second) {
      // The store removes by name: dropping this one there would drop the first one too, which
      // may be adopted (and lost at the next start). Only the first is used; this one closes.
      Log(LogLevel::kWarning, "adoption: ", LogSafe(named.name),
          " handed over more than once; only the first is used");
      if (absl::StartsWith(named.name, kRecordPrefix)) ++result->records_dropped;
      continue;
    }
    if (absl::StartsWith(named.name, kSegmentPrefix)) {
      const std::string segment = named.name.substr(kSegmentPrefix.size());
      if (absl::Status adopted = pool->AdoptSegment(segment, std::move(named.fd)); !adopted.ok()) {
        Log(LogLevel::kWarning, "adoption: ", LogSafe(named.name), " dropped: ", adopted.message());
        (void)store.Remove(named.name);
      }
    } else if (absl::StartsWith(named.name, kRecordPrefix)) {
      auto record = ReadTensorRecord(named.fd.get());
      if (!record.ok()) {
        Drop(store, named.name, std::string(record.status().message()), &result->records_dropped);
        continue;
      }
      if (named.name != RecordFdName(record->info().version())) {
        Drop(store, named.name, "its name does not match its version", &result->records_dropped);
        continue;
      }
      records.emplace(named.name, *std::move(record));
    } else {
      result->others.push_back(std::move(named));
    }
  }
  return records;
}

}  // namespace

Adoption AdoptStoredDescriptors(std::vector<NamedFd> descriptors, CpuSegmentPool* pool,
                                const FdStore& store) {
  Adoption result;
  const std::map<std::string, v1::TensorRecord> records =
      SortHanded(std::move(descriptors), pool, store, &result);

  // Each name's versions, highest first: the highest one that checks out is adopted, with as
  // many more as its keep asks for (of the name's owner); the others (out of the history,
  // left by a replace that a kill interrupted, or not valid) are dropped.
  std::map<std::string, std::map<uint64_t, std::string, std::greater<>>> versions;
  for (const auto& [fd_name, record] : records) {
    versions[record.info().name()][record.info().version()] = fd_name;
  }
  std::map<std::string, bool> segments_used;
  for (const auto& [name, by_version] : versions) {
    size_t adopted_count = 0;
    uint32_t keep = 1;        // the highest adopted version's
    uint32_t name_owner = 0;  // likewise
    for (const auto& [version, fd_name] : by_version) {
      if (adopted_count == keep) {
        Drop(store, fd_name,
             keep == 1 ? "a higher version of its name was adopted"
                       : absl::StrCat("the name keeps ", keep, " versions, all adopted"),
             &result.records_dropped);
        continue;
      }
      const v1::TensorRecord& record = records.at(fd_name);
      auto adopted = ToAdopted(record);
      if (!adopted.ok()) {
        Drop(store, fd_name, std::string(adopted.status().message()), &result.records_dropped);
        continue;
      }
      if (adopted_count > 0 && adopted->name_owner != name_owner) {
        Drop(store, fd_name, "the name's owner differs from its newer version's",
             &result.records_dropped);
        continue;
      }
      auto block = pool->AdoptBlock(record.segment(), record.offset(), record.block_size(),
                                    BlockKindOf(adopted->spec), SharingKeyOf(adopted->spec));
      if (!block.ok()) {
        Drop(store, fd_name, std::string(block.status().message()), &result.records_dropped);
        continue;
      }
      adopted->block = *std::move(block);
      result.bytes += adopted->spec.nbytes;
      segments_used[record.segment()] = true;
      if (adopted_count++ == 0) {
        keep = adopted->spec.keep;
        name_owner = adopted->name_owner;
      }
      result.tensors.push_back(*std::move(adopted));
    }
  }
  result.segments = segments_used.size();
  std::vector<std::string> freed;
  pool->RemoveUnclaimed(&freed);
  result.segments_freed = freed.size();
  return result;
}

}  // namespace tensorbroker::daemon
