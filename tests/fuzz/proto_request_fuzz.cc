// Feeds: after a selector byte (even: Create, odd: Put), the bytes as a serialized
// v1.CreateRequest or v1.PutRequest (the first message of a Put stream), decoded with
// ParseFromString as gRPC does, then what the daemon does with it before touching the store:
// MakeSpec (daemon/wire/request_spec.h) and AccessPolicy::Admit with the request's readers, as
// BrokerService::DoCreate and PutReactor::Begin call them.
// Asserts, where MakeSpec succeeds: the name is valid; dtype, shape and given strides are the
// request's; a stride per dimension, none negative; nbytes at most 2^62, equal to a non-zero
// requested nbytes, and never less than the bytes the layout reaches, (1 + sum((shape[i] - 1)
// * strides[i])) * itemsize (recomputed here in 128 bits), which it equals when the request
// left nbytes to the daemon; a Put's is exactly elements * itemsize; the device is this CPU-only
// build's CPU. Where Admit succeeds: the owner is the caller and the readers are a canonical
// set that parses back to itself.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/tensor_layout.h"
#include "common/wire/proto_convert.h"
#include "daemon/store/access_policy.h"
#include "daemon/wire/request_spec.h"
#include "tensorbroker/v1/broker.pb.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/quiet_daemon_logs.h"

namespace tensorbroker::daemon {
namespace {

const Principal kCaller{1000, {1000}, false, {}};

// A policy with the rules the daemon's config can set: a prefix only root may publish under,
// and one whose tensors get other default readers.
const AccessPolicy& Policy() {
  static const AccessPolicy* policy = [] {
    AccessConfig config;
    config.prefix_rules["locked/"].publishers = *PrincipalSet::ParseList("uid:0", "fuzz");
    config.prefix_rules["team/"].readers = *PrincipalSet::ParseList("uid:1000,gid:27", "fuzz");
    config.default_readers = *PrincipalSet::ParseList("*", "fuzz");
    return new AccessPolicy(config);
  }();
  return *policy;
}

using Int128 = unsigned __int128;

void CheckSpec(const TensorSpec& spec, const std::string& name, const v1::DataType& dtype,
               const google::protobuf::RepeatedField<int64_t>& shape,
               const google::protobuf::RepeatedField<int64_t>& strides, uint64_t nbytes,
               bool is_put) {
  FUZZ_CHECK(spec.name == name && ValidateName(spec.name).ok(), "name");
  const DLDataType type = FromProto(dtype);
  FUZZ_CHECK(spec.dtype.code == type.code && spec.dtype.bits == type.bits &&
                 spec.dtype.lanes == type.lanes && ValidateDType(spec.dtype).ok(),
             "dtype");
  FUZZ_CHECK(spec.shape == ToVector(shape) && spec.shape.size() <= kMaxDims, "shape");
  FUZZ_CHECK(spec.strides.size() == spec.shape.size(), "%zu strides for %zu dimensions",
             spec.strides.size(), spec.shape.size());
  if (!strides.empty()) FUZZ_CHECK(spec.strides == ToVector(strides), "strides changed");
  FUZZ_CHECK(spec.device.device_type == kDLCPU && spec.device.device_id == 0, "device");

  const Int128 item = ItemSize(spec.dtype);
  Int128 elements = 1, last = 0;
  for (size_t i = 0; i < spec.shape.size(); ++i) {
    FUZZ_CHECK(spec.shape[i] >= 0 && spec.strides[i] >= 0, "negative shape or stride");
    elements *= static_cast<uint64_t>(spec.shape[i]);
    if (spec.shape[i] > 0) last += Int128(spec.shape[i] - 1) * uint64_t(spec.strides[i]);
  }
  const Int128 span = elements == 0 ? 0 : (last + 1) * item;
  FUZZ_CHECK(spec.nbytes <= (uint64_t{1} << 62), "nbytes %llu past 2^62",
             static_cast<unsigned long long>(spec.nbytes));
  FUZZ_CHECK(span <= spec.nbytes, "the layout reaches past nbytes %llu",
             static_cast<unsigned long long>(spec.nbytes));
  if (nbytes != 0) {
    FUZZ_CHECK(spec.nbytes == nbytes, "requested nbytes %llu became %llu",
               static_cast<unsigned long long>(nbytes),
               static_cast<unsigned long long>(spec.nbytes));
  } else {
    FUZZ_CHECK(span == spec.nbytes, "nbytes %llu is not the span",
               static_cast<unsigned long long>(spec.nbytes));
  }
  if (is_put) FUZZ_CHECK(elements * item == spec.nbytes, "a Put's nbytes is not compact");
}

void CheckAdmitted(const TensorSpec& spec) {
  FUZZ_CHECK(spec.owner_uid == kCaller.uid, "owner %u", spec.owner_uid);
  const std::vector<std::string> entries = spec.readers.Entries();
  auto again = PrincipalSet::Parse(entries, "readers");
  FUZZ_CHECK(again.ok() && *again == spec.readers && again->Entries() == entries,
             "readers do not parse back to themselves");
}

template <typename Request>
void Admit(const Request& request, const char* field, TensorSpec* spec) {
  const std::vector<std::string> readers(request.readers().begin(), request.readers().end());
  if (Policy().Admit(kCaller, readers, field, spec).ok()) CheckAdmitted(*spec);
}

}  // namespace
}  // namespace tensorbroker::daemon

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tensorbroker::daemon;
  namespace v1 = tensorbroker::v1;
  if (size == 0) return 0;
  const bool put = (data[0] & 1) != 0;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (!put) {
    v1::CreateRequest request;
    if (!request.ParseFromString(bytes)) return 0;
    auto spec = MakeSpec(request);
    if (!spec.ok()) return 0;
    CheckSpec(*spec, request.name(), request.dtype(), request.shape(), request.strides(),
              request.nbytes(), false);
    Admit(request, "readers", &*spec);
  } else {
    v1::PutRequest message;
    if (!message.ParseFromString(bytes) || !message.has_header()) return 0;
    const v1::PutRequest::Header& header = message.header();
    auto spec = MakeSpec(header);
    if (!spec.ok()) return 0;
    CheckSpec(*spec, header.name(), header.dtype(), header.shape(), {}, 0, true);
    Admit(header, "header.readers", &*spec);
  }
  return 0;
}
