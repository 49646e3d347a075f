// Conversions between the wire messages (tensorbroker.v1) and the plain C++/DLPack types: both
// ways for dtypes and devices, and from the wire into the client's public types (types.h). The
// daemon's own types go onto the wire in daemon/wire/store_proto.h. Conversions never validate:
// the daemon validates what it receives separately.
#ifndef TENSORBROKER_COMMON_PROTO_CONVERT_H_
#define TENSORBROKER_COMMON_PROTO_CONVERT_H_

#include <dlpack/dlpack.h>

#include <cstdint>
#include <vector>

#include "google/protobuf/message.h"
#include "tensorbroker/types.h"
#include "tensorbroker/v1/broker.pb.h"

namespace tensorbroker {

// Out-of-range wire values (code > 255 and so on) map to values ValidateDType rejects.
DLDataType FromProto(const v1::DataType& dtype);
void ToProto(const DLDataType& dtype, v1::DataType* out);

// Keeps device_id as sent: for CUDA the sender's ordinal. Mapping a UUID to a local ordinal
// would initialise CUDA in every process that merely reads a Stat; clients map UUIDs only when
// they open a slab (region_mapper.cc).
DLDevice FromProto(const v1::Device& device);
// For CUDA also fills in the GPU's UUID (this process's ordinal `device_id`).
void ToProto(const DLDevice& device, v1::Device* out);

std::vector<int64_t> ToVector(const google::protobuf::RepeatedField<int64_t>& values);

TensorInfo FromProto(const v1::TensorInfo& info);

WatchEvent FromProto(const v1::WatchEvent& event);

// The counters of common/stats_schema.h go by their rows: each from (and, in the daemon, to) the
// uint64 field named as its key (protobuf reflection).
BrokerStats FromProto(const v1::BrokerStats& stats);
// The uint64 field of `message` named `key` (a stats row's); nullptr if none (StatsSchema tests
// that every row has one).
const google::protobuf::FieldDescriptor* StatsCounterField(const google::protobuf::Message& message,
                                                           const char* key);

}  // namespace tensorbroker

#endif  // TENSORBROKER_COMMON_PROTO_CONVERT_H_
