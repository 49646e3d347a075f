#include "daemon/store/quota_ledger.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/byte_size.h"

namespace tensorbroker::daemon {
namespace {

absl::Status TooMany(const char* what, uint32_t uid, size_t most) {
  if (uid == kPeerUid) {  // every peer's streams count together
    return absl::ResourceExhaustedError(absl::StrCat(
        what, ": the peers have ", most, " already (the most all peers together may have)"));
  }
  return absl::ResourceExhaustedError(
      absl::StrCat(what, ": uid ", uid, " has ", most, " already (the most one user may have)"));
}

}  // namespace

absl::Status CountIn(std::map<uint32_t, size_t>* counts, uint32_t uid, size_t most,
                     const char* what) {
  size_t& count = (*counts)[uid];
  if (count >= most) return TooMany(what, uid, most);
  ++count;
  return absl::OkStatus();
}

void CountOff(std::map<uint32_t, size_t>* counts, uint32_t uid) {
  auto it = counts->find(uid);
  if (it == counts->end()) return;
  if (--it->second == 0) counts->erase(it);
}

QuotaLedger::QuotaLedger(std::function<Quota(uint32_t uid)> quota_for, StreamLimits limits)
    : quota_for_(std::move(quota_for)) {
  reads_.most = limits.reads;
  reads_.what = "reads in progress";
  watches_.most = limits.watches;
  watches_.what = "watches";
}

absl::Status QuotaLedger::CheckRoom(uint32_t uid, const std::string& name, uint64_t nbytes) const {
  if (!quota_for_) return absl::OkStatus();
  const Quota quota = quota_for_(uid);
  const Usage usage = UsageOf(uid);
  auto in_use = [&] {
    return absl::StrCat(DescribeUid(uid), " holds ", FormatByteSize(usage.bytes), " in ",
                        usage.tensors, " tensor(s)");
  };
  if (quota.bytes != 0 && nbytes > quota.bytes - std::min(quota.bytes, usage.bytes)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("quota-bytes: name '", name, "' needs ", FormatByteSize(nbytes), "; ",
                     in_use(), " of its quota of ", FormatByteSize(quota.bytes),
                     " (release or delete tensors, or ask for a larger quota)"));
  }
  if (quota.tensors != 0 && usage.tensors >= quota.tensors) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "quota-tensors: name '", name, "': ", in_use(), ", its quota is ", quota.tensors,
        " tensor(s) (release or delete tensors, or ask for a larger quota)"));
  }
  return absl::OkStatus();
}

void QuotaLedger::Charge(uint32_t uid, uint64_t nbytes) {
  Usage& usage = usage_[uid];
  usage.bytes += nbytes;
  ++usage.tensors;
}

void QuotaLedger::Refund(uint32_t uid, uint64_t nbytes) {
  auto usage = usage_.find(uid);
  usage->second.bytes -= nbytes;
  if (--usage->second.tensors == 0) usage_.erase(usage);
}

QuotaLedger::Usage QuotaLedger::UsageOf(uint32_t uid) const {
  auto it = usage_.find(uid);
  return it == usage_.end() ? Usage{} : it->second;
}

StoreStats::User QuotaLedger::Row(uint32_t uid, const Usage& usage) const {
  StoreStats::User row;
  row.uid = uid;
  row.bytes = usage.bytes;
  row.tensors = usage.tensors;
  if (quota_for_) {
    const Quota quota = quota_for_(uid);
    row.quota_bytes = quota.bytes;
    row.quota_tensors = quota.tensors;
  }
  return row;
}

std::vector<StoreStats::User> QuotaLedger::Users(const Principal& caller) const {
  std::vector<StoreStats::User> rows;
  if (caller.admin) {
    for (const auto& [uid, usage] : usage_) rows.push_back(Row(uid, usage));
  } else if (!caller.is_peer()) {  // a peer holds nothing here
    rows.push_back(Row(caller.uid, UsageOf(caller.uid)));
  }
  return rows;
}

absl::Status QuotaLedger::CheckStream(Stream kind, uint32_t uid) const {
  const Streams& streams = StreamsOf(kind);
  auto it = streams.per_uid.find(uid);
  const size_t count = it == streams.per_uid.end() ? 0 : it->second;
  if (count >= streams.most) return TooMany(streams.what, uid, streams.most);
  return absl::OkStatus();
}

void QuotaLedger::OpenStream(Stream kind, uint64_t id, uint32_t uid) {
  Streams& streams = StreamsOf(kind);
  ++streams.per_uid[uid];
  streams.uid_of[id] = uid;
}

void QuotaLedger::CloseStream(Stream kind, uint64_t id) {
  Streams& streams = StreamsOf(kind);
  auto it = streams.uid_of.find(id);
  if (it == streams.uid_of.end()) return;
  CountOff(&streams.per_uid, it->second);
  streams.uid_of.erase(it);
}

}  // namespace tensorbroker::daemon
