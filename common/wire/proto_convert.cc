#include "common/wire/proto_convert.h"

#include <cstddef>

#include "common/cuda_devices.h"
#include "common/stats_schema.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace tensorbroker {

const google::protobuf::FieldDescriptor* StatsCounterField(const google::protobuf::Message& message,
                                                           const char* key) {
  const google::protobuf::FieldDescriptor* field = message.GetDescriptor()->FindFieldByName(key);
  if (field == nullptr || field->is_repeated() ||
      field->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_UINT64) {
    return nullptr;
  }
  return field;
}

namespace {

// Every counter of a stats_schema.h table, from the proto message's field of its name.
template <typename Struct, size_t N>
void CountersFromProto(const StatsField<Struct> (&rows)[N], const google::protobuf::Message& in,
                       Struct* out) {
  for (const StatsField<Struct>& row : rows) {
    const google::protobuf::FieldDescriptor* field = StatsCounterField(in, row.key);
    if (field != nullptr) out->*row.member = in.GetReflection()->GetUInt64(in, field);
  }
}

}  // namespace

DLDataType FromProto(const v1::DataType& dtype) {
  DLDataType out;
  // Values that do not fit DLDataType's fields become (255, 0, 0): never a valid dtype.
  const bool fits = dtype.code() <= 0xff && dtype.bits() <= 0xff && dtype.lanes() <= 0xffff;
  out.code = fits ? static_cast<uint8_t>(dtype.code()) : 0xff;
  out.bits = fits ? static_cast<uint8_t>(dtype.bits()) : 0;
  out.lanes = fits ? static_cast<uint16_t>(dtype.lanes()) : 0;
  return out;
}

void ToProto(const DLDataType& dtype, v1::DataType* out) {
  out->set_code(dtype.code);
  out->set_bits(dtype.bits);
  out->set_lanes(dtype.lanes);
}

DLDevice FromProto(const v1::Device& device) {
  DLDevice out;
  out.device_type = static_cast<DLDeviceType>(device.device_type());
  out.device_id = device.device_id();
  return out;
}

void ToProto(const DLDevice& device, v1::Device* out) {
  out->set_device_type(device.device_type);
  out->set_device_id(device.device_id);
  if (device.device_type != kDLCUDA) return;
  auto devices = CudaDevices();
  if (!devices.ok()) return;
  for (const CudaDevice& gpu : *devices) {
    if (gpu.ordinal != device.device_id) continue;
    out->set_uuid(std::string(gpu.uuid.begin(), gpu.uuid.end()));
  }
}

std::vector<int64_t> ToVector(const google::protobuf::RepeatedField<int64_t>& values) {
  return std::vector<int64_t>(values.begin(), values.end());
}

TensorInfo FromProto(const v1::TensorInfo& info) {
  TensorInfo out;
  out.name = info.name();
  out.dtype = FromProto(info.dtype());
  out.shape = ToVector(info.shape());
  out.strides = ToVector(info.strides());
  out.nbytes = info.nbytes();
  out.device = FromProto(info.device());
  out.sealed = info.sealed();
  out.is_mutable = info.mutable_();
  out.version = info.version();
  out.leases = info.leases();
  out.created_unix_ms = info.created_unix_ms();
  out.owner_uid = info.owner_uid();
  out.readers.assign(info.readers().begin(), info.readers().end());
  out.keep = info.keep() == 0 ? 1 : info.keep();  // 0: from a daemon before keep
  out.ephemeral = info.ephemeral();
  if (info.has_origin()) {
    out.origin = TensorInfo::Origin{info.origin().peer(), info.origin().version(),
                                    info.origin().fetched_unix_ms()};
  }
  out.kept_versions.assign(info.kept_versions().begin(), info.kept_versions().end());
  return out;
}

WatchEvent FromProto(const v1::WatchEvent& event) {
  WatchEvent out;
  switch (event.kind()) {
    case v1::WatchEvent::REPLACED:
      out.kind = WatchEvent::Kind::kReplaced;
      break;
    case v1::WatchEvent::DELETED:
      out.kind = WatchEvent::Kind::kDeleted;
      break;
    case v1::WatchEvent::EXPIRED:
      out.kind = WatchEvent::Kind::kExpired;
      break;
    case v1::WatchEvent::LOST:
      out.kind = WatchEvent::Kind::kLost;
      break;
    default:
      out.kind = WatchEvent::Kind::kPublished;
      break;
  }
  out.sequence = event.sequence();
  out.name = event.name();
  out.version = event.version();
  out.previous_version = event.previous_version();
  if (event.has_info()) out.info = FromProto(event.info());
  out.lost_first = event.lost_first();
  out.lost_last = event.lost_last();
  return out;
}

BrokerStats FromProto(const v1::BrokerStats& stats) {
  BrokerStats out;
  CountersFromProto(kBrokerStatsFields, stats, &out);
  for (const v1::PoolStats& pool : stats.pools()) {
    PoolUsage usage;
    usage.device = FromProto(pool.device());
    CountersFromProto(kPoolStatsFields, pool, &usage);
    usage.handles = pool.handles();
    out.pools.push_back(usage);
  }
  for (const v1::MethodStats& method : stats.methods()) {
    MethodStats m;
    m.method = method.method();
    for (const auto& call : method.calls()) m.calls.emplace_back(call.code(), call.count());
    m.bucket_bounds_seconds.assign(method.bucket_bounds_seconds().begin(),
                                   method.bucket_bounds_seconds().end());
    m.bucket_counts.assign(method.bucket_counts().begin(), method.bucket_counts().end());
    m.latency_sum_seconds = method.latency_sum_seconds();
    m.latency_count = method.latency_count();
    out.methods.push_back(std::move(m));
  }
  for (const v1::UserUsage& user : stats.users()) {
    UserUsage usage;
    usage.uid = user.uid();
    usage.user = user.user();
    CountersFromProto(kUserStatsFields, user, &usage);
    out.users.push_back(std::move(usage));
  }
  for (const v1::PeerUsage& peer : stats.peers()) {
    PeerUsage usage;
    usage.peer = peer.peer();
    CountersFromProto(kPeerStatsFields, peer, &usage);
    out.peers.push_back(std::move(usage));
  }
  for (const v1::RemoteUsage& remote : stats.remotes()) {
    RemoteUsage usage;
    usage.peer = remote.peer();
    CountersFromProto(kRemoteStatsFields, remote, &usage);
    out.remotes.push_back(std::move(usage));
  }
  return out;
}

}  // namespace tensorbroker
