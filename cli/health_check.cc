#include "cli/health_check.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "common/server_identity.h"
#include "common/wire/grpc_status.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace tensorbroker::cli {

absl::StatusOr<std::string> CheckHealth(const std::string& socket_path, absl::Duration timeout) {
  // A squatter's "SERVING" is no readiness. Nobody there yet is left to the health call to say.
  if (absl::Status server = VerifyServerAt(socket_path);
      !server.ok() && !absl::IsUnavailable(server)) {
    return server;
  }
  auto channel =
      grpc::CreateChannel(absl::StrCat("unix:", socket_path), grpc::InsecureChannelCredentials());
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status());
}

}  // namespace tensorbroker::cli
