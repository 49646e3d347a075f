// One log line per call, the same for the gRPC service and the local channel:
//   "Get name=\"a/b\" pid=123 uid=1000: lease 7 on float32[2,3] 24 bytes on cpu"
// Failures are logged at a level chosen by their code (FailureLevel), successes at the level
// the caller names (debug for the hot calls). Text is built only when its line is logged, so
// calls cost nothing extra at info. Stateless; thread-safe.
#ifndef TENSORBROKER_DAEMON_CALL_LOG_H_
#define TENSORBROKER_DAEMON_CALL_LOG_H_

#include <dlpack/dlpack.h>

#include <cstdint>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "daemon/base/log.h"

namespace tensorbroker::daemon {

using LogText = absl::FunctionRef<std::string()>;

// The daemon's own faults are errors, exhausted capacity and refused access are warnings,
// malformed requests info; what clients meet in normal flow (not found, already exists,
// deadlines, cancellations) is debug.
LogLevel FailureLevel(absl::StatusCode code);
// name="a/b"; an invalid name from a client is escaped and cut, never raw.
std::string NameField(absl::string_view name);
// "float32[10,100] 4000 bytes on cpu": what a tensor is, never what it holds.
std::string DescribeTensor(DLDataType dtype, absl::Span<const int64_t> shape, uint64_t nbytes,
                           DLDevice device);
// The same of a tensor's view (the store's TensorView): anything with those members.
template <typename View>
std::string DescribeTensor(const View& view) {
  return DescribeTensor(view.dtype, view.shape, view.nbytes, view.device);
}

// "<method> <what> <client>: <CODE>: <message>" at FailureLevel; nothing for OK.
void LogCallFailure(absl::string_view method, LogText what, LogText client,
                    const absl::Status& status);
// "<method> <what> <client>: <outcome>".
void LogCallSuccess(LogLevel level, absl::string_view method, LogText what, LogText client,
                    LogText outcome);

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_CALL_LOG_H_
