#include "common/wire/proto_convert.h"

#include <cstddef>

#include "common/cuda_devices.h"
#include "common/stats_schema.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace tensorbroker {
namespace {

// The uint64 field of `message` named as the row's key; nullptr if none (StatsSchema tests that
// every row has one).
const google::protobuf::FieldDescriptor* CounterField(const google::protobuf::Message& message,
                                                      const char* key) {
  const google::protobuf::FieldDescriptor* field = message.GetDescriptor()->FindFieldByName(key);
  if (field == nullptr || field->is_repeated() ||
      field->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_UINT64) {
    return nullptr;
  }
  return field;
}

// Every counter of a stats_schema.h table, from or to the proto message's field of its name.
template <typename Struct, size_t N>
void CountersFromProto(const StatsField<Struct> (&rows)[N], const google::protobuf::Message& in,
                       Struct* out) {
  for (const StatsField<Struct>& row : rows) {
    const google::protobuf::FieldDescriptor* field = CounterField(in, row.key);
    if (field != nullptr) out->*row.member = in.GetReflection()->GetUInt64(in, field);
  }
}

template <typename Struct, size_t N>
void CountersToProto(const StatsField<Struct> (&rows)[N], const Struct& in,
                     google::protobuf::Message* out) {
  for (const StatsField<Struct>& row : rows) {
    const google::protobuf::FieldDescriptor* field = CounterField(*out, row.key);
    if (field != nullptr) out->GetReflection()->SetUInt64(out, field, in.*row.member);
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
  out.kept_versions.assign(info.kept_versions().begin(), info.kept_versions().end());
  return out;
}

void ToProto(const TensorInfo& info, v1::TensorInfo* out) {
  out->set_name(info.name);
  ToProto(info.dtype, out->mutable_dtype());
  out->mutable_shape()->Assign(info.shape.begin(), info.shape.end());
  out->mutable_strides()->Assign(info.strides.begin(), info.strides.end());
  out->set_nbytes(info.nbytes);
  ToProto(info.device, out->mutable_device());
  out->set_sealed(info.sealed);
  out->set_mutable_(info.is_mutable);
  out->set_version(info.version);
  out->set_leases(info.leases);
  out->set_created_unix_ms(info.created_unix_ms);
  out->set_owner_uid(info.owner_uid);
  for (const std::string& reader : info.readers) out->add_readers(reader);
  out->set_keep(info.keep);
  out->set_ephemeral(info.ephemeral);
  out->mutable_kept_versions()->Assign(info.kept_versions.begin(), info.kept_versions.end());
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

void ToProto(const WatchEvent& event, v1::WatchEvent* out) {
  switch (event.kind) {
    case WatchEvent::Kind::kPublished:
      out->set_kind(v1::WatchEvent::PUBLISHED);
      break;
    case WatchEvent::Kind::kReplaced:
      out->set_kind(v1::WatchEvent::REPLACED);
      break;
    case WatchEvent::Kind::kDeleted:
      out->set_kind(v1::WatchEvent::DELETED);
      break;
    case WatchEvent::Kind::kExpired:
      out->set_kind(v1::WatchEvent::EXPIRED);
      break;
    case WatchEvent::Kind::kLost:
      out->set_kind(v1::WatchEvent::LOST);
      break;
  }
  out->set_sequence(event.sequence);
  out->set_name(event.name);
  out->set_version(event.version);
  out->set_previous_version(event.previous_version);
  if (event.kind != WatchEvent::Kind::kLost) ToProto(event.info, out->mutable_info());
  out->set_lost_first(event.lost_first);
  out->set_lost_last(event.lost_last);
}

BrokerStats FromProto(const v1::BrokerStats& stats) {
  BrokerStats out;
  CountersFromProto(kBrokerStatsFields, stats, &out);
  for (const v1::PoolStats& pool : stats.pools()) {
    PoolUsage usage;
    usage.device = FromProto(pool.device());
    CountersFromProto(kPoolStatsFields, pool, &usage);
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
  return out;
}

void ToProto(const BrokerStats& stats, v1::BrokerStats* out) {
  CountersToProto(kBrokerStatsFields, stats, out);
  for (const PoolUsage& usage : stats.pools) {
    v1::PoolStats* pool = out->add_pools();
    ToProto(usage.device, pool->mutable_device());
    CountersToProto(kPoolStatsFields, usage, pool);
  }
  for (const MethodStats& m : stats.methods) {
    v1::MethodStats* method = out->add_methods();
    method->set_method(m.method);
    for (const auto& [code, count] : m.calls) {
      v1::MethodStats::CodeCount* call = method->add_calls();
      call->set_code(code);
      call->set_count(count);
    }
    method->mutable_bucket_bounds_seconds()->Assign(m.bucket_bounds_seconds.begin(),
                                                    m.bucket_bounds_seconds.end());
    method->mutable_bucket_counts()->Assign(m.bucket_counts.begin(), m.bucket_counts.end());
    method->set_latency_sum_seconds(m.latency_sum_seconds);
    method->set_latency_count(m.latency_count);
  }
  for (const UserUsage& usage : stats.users) {
    v1::UserUsage* user = out->add_users();
    user->set_uid(usage.uid);
    user->set_user(usage.user);
    CountersToProto(kUserStatsFields, usage, user);
  }
}

}  // namespace tensorbroker
