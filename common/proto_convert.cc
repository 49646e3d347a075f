#include "common/proto_convert.h"

namespace tensorbroker {

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
}

std::vector<int64_t> ToVector(const google::protobuf::RepeatedField<int64_t>& values) {
  return std::vector<int64_t>(values.begin(), values.end());
}

}  // namespace tensorbroker
