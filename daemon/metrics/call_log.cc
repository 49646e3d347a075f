#include "daemon/metrics/call_log.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tensorbroker/dtype_names.h"

namespace tensorbroker::daemon {
namespace {

std::string Subject(absl::string_view method, LogText what, LogText client) {
  const std::string about = what();
  return absl::StrCat(method, about.empty() ? "" : " ", about, " ", client());
}

}  // namespace

LogLevel FailureLevel(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kUnknown:
      return LogLevel::kError;
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kPermissionDenied:
      return LogLevel::kWarning;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kUnimplemented:
      return LogLevel::kInfo;
    default:
      return LogLevel::kDebug;
  }
}

std::string NameField(absl::string_view name) {
  return absl::StrCat("name=\"", LogSafe(name), "\"");
}

std::string DescribeTensor(DLDataType dtype, absl::Span<const int64_t> shape, uint64_t nbytes,
                           DLDevice device) {
  return absl::StrCat(DTypeName(dtype), "[", absl::StrJoin(shape, ","), "] ", nbytes, " bytes on ",
                      DeviceName(device));
}

void LogCallFailure(absl::string_view method, LogText what, LogText client,
                    const absl::Status& status) {
  if (status.ok()) return;
  const LogLevel level = FailureLevel(status.code());
  if (!LogEnabled(level)) return;
  Log(level, Subject(method, what, client), ": ", absl::StatusCodeToString(status.code()), ": ",
      LogSafe(status.message()));
}

void LogCallSuccess(LogLevel level, absl::string_view method, LogText what, LogText client,
                    LogText outcome) {
  if (LogEnabled(level)) Log(level, Subject(method, what, client), ": ", outcome());
}

}  // namespace tensorbroker::daemon
