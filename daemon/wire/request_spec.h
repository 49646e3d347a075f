// Wire <-> store for the requests the gRPC service and the local channel share: every field of
// a tensor-making request validated into a TensorSpec (name, dtype, shape, strides, sizes,
// device), and a store grant written out as a v1.TensorGrant. Stateless.
#ifndef TENSORBROKER_DAEMON_REQUEST_SPEC_H_
#define TENSORBROKER_DAEMON_REQUEST_SPEC_H_

#include <string>

#include "absl/status/statusor.h"
#include "daemon/store/tensor_store.h"
#include "tensorbroker/v1/broker.pb.h"

namespace tensorbroker::daemon {

// Validates the fields every tensor-making request shares and builds the store's spec.
absl::StatusOr<TensorSpec> MakeSpec(const std::string& name, const v1::DataType& dtype,
                                    const google::protobuf::RepeatedField<int64_t>& shape,
                                    const google::protobuf::RepeatedField<int64_t>& strides,
                                    uint64_t nbytes, bool is_mutable, bool replace, bool has_device,
                                    const v1::Device& device);
// The same for a CreateRequest.
absl::StatusOr<TensorSpec> MakeSpec(const v1::CreateRequest& request);
// The same for a Put's header: compact strides, and a buffer exactly as large as the elements.
absl::StatusOr<TensorSpec> MakeSpec(const v1::PutRequest::Header& header);

void ToProto(const TensorGrant& grant, v1::TensorGrant* out);

// Which version a GetRequest asks for (checked by the store: TensorStore::GetOrWait).
VersionWanted VersionWantedOf(const v1::GetRequest& request);

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_REQUEST_SPEC_H_
