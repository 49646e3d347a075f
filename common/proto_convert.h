// Conversions between the wire messages (tensorbroker.v1) and the plain C++/DLPack types used on
// either side. Conversions never validate: the daemon validates what it receives separately.
#ifndef TENSORBROKER_COMMON_PROTO_CONVERT_H_
#define TENSORBROKER_COMMON_PROTO_CONVERT_H_

#include <dlpack/dlpack.h>

#include <cstdint>
#include <vector>

#include "tensorbroker/types.h"
#include "tensorbroker/v1/broker.pb.h"

namespace tensorbroker {

// Out-of-range wire values (code > 255 and so on) map to values ValidateDType rejects.
DLDataType FromProto(const v1::DataType& dtype);
void ToProto(const DLDataType& dtype, v1::DataType* out);

DLDevice FromProto(const v1::Device& device);
void ToProto(const DLDevice& device, v1::Device* out);

std::vector<int64_t> ToVector(const google::protobuf::RepeatedField<int64_t>& values);

TensorInfo FromProto(const v1::TensorInfo& info);
void ToProto(const TensorInfo& info, v1::TensorInfo* out);

BrokerStats FromProto(const v1::BrokerStats& stats);
void ToProto(const BrokerStats& stats, v1::BrokerStats* out);

}  // namespace tensorbroker

#endif  // TENSORBROKER_COMMON_PROTO_CONVERT_H_
