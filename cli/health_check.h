// One grpc.health.v1.Health/Check call to tensorbrokerd (service "": the whole server), for
// `tensorbroker health`. Its own channel, no session: it works while the daemon is busy or
// shutting down, and never waits past the deadline. Thread-compatible.
#ifndef TENSORBROKER_CLI_HEALTH_CHECK_H_
#define TENSORBROKER_CLI_HEALTH_CHECK_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tensorbroker::cli {

// The serving status the daemon answered ("SERVING", "NOT_SERVING", ...), or the gRPC error
// (UNAVAILABLE when nothing listens, DEADLINE_EXCEEDED when no answer came within `timeout`);
// FAILED_PRECONDITION, asking nothing, when the socket's server is not trusted
// (common/server_identity.h), PERMISSION_DENIED when this process may not connect.
absl::StatusOr<std::string> CheckHealth(const std::string& socket_path, absl::Duration timeout);

}  // namespace tensorbroker::cli

#endif  // TENSORBROKER_CLI_HEALTH_CHECK_H_
