// absl::Status <-> grpc::Status. The codes are the same numbers, so errors cross the socket
// unchanged in both directions. Thread-safe.
#ifndef TENSORBROKER_COMMON_GRPC_STATUS_H_
#define TENSORBROKER_COMMON_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace tensorbroker {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace tensorbroker

#endif  // TENSORBROKER_COMMON_GRPC_STATUS_H_
