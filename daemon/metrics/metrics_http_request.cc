#include "daemon/metrics/metrics_http_request.h"

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tensorbroker::daemon {
namespace {

std::string Response(absl::string_view status, absl::string_view content_type,
                     absl::string_view body, bool with_body, absl::string_view extra_headers = "") {
  return absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: ", content_type,
                      "\r\nContent-Length: ", body.size(), "\r\n", extra_headers,
                      "Connection: close\r\n\r\n", with_body ? body : "");
}

// Whether `request` holds the end of an HTTP head (a blank line), looking only where its last
// `new_bytes` could have completed one.
bool RequestComplete(absl::string_view request, size_t new_bytes) {
  const size_t from = request.size() - new_bytes;
  const absl::string_view tail = request.substr(from < 3 ? 0 : from - 3);
  return absl::StrContains(tail, "\r\n\r\n") || absl::StrContains(tail, "\n\n");
}

// The length of the head `request` holds, blank line included (RequestComplete was true).
size_t HeadLength(absl::string_view request) {
  const size_t crlf = request.find("\r\n\r\n");
  const size_t lf = request.find("\n\n");
  return std::min(crlf == absl::string_view::npos ? request.size() : crlf + 4,
                  lf == absl::string_view::npos ? request.size() : lf + 2);
}

}  // namespace

std::optional<std::string> TakeMetricsRequestBytes(std::string* request, absl::string_view received,
                                                   absl::FunctionRef<std::string()> render) {
  request->append(received.data(), received.size());
  const bool complete = RequestComplete(*request, received.size());
  // A head over the limit is refused however its bytes came (in one read, or many).
  if (complete && HeadLength(*request) <= kMaxMetricsRequestBytes) {
    return RespondToMetricsRequest(*request, render);
  }
  if (complete || request->size() >= kMaxMetricsRequestBytes) {
    return Response("431 Request Header Fields Too Large", "text/plain", "request too large\n",
                    true);
  }
  return std::nullopt;
}

std::string RespondToMetricsRequest(absl::string_view request,
                                    absl::FunctionRef<std::string()> render) {
  const absl::string_view first_line = request.substr(0, request.find('\n'));
  const std::vector<absl::string_view> parts =
      absl::StrSplit(absl::StripAsciiWhitespace(first_line), ' ');
  if (parts.size() != 3 || !absl::StartsWith(parts[2], "HTTP/1.")) {
    return Response("400 Bad Request", "text/plain", "malformed request\n", true);
  }
  const bool head = parts[0] == "HEAD";
  if (parts[0] != "GET" && !head) {
    return Response("405 Method Not Allowed", "text/plain", "only GET and HEAD\n", true,
                    "Allow: GET, HEAD\r\n");
  }
  const absl::string_view path = parts[1].substr(0, parts[1].find('?'));
  if (path == "/metrics") {
    return Response("200 OK", "text/plain; version=0.0.4; charset=utf-8", render(), !head);
  }
  if (path == "/") {
    return Response("200 OK", "text/plain; charset=utf-8", "tensorbrokerd: metrics at /metrics\n",
                    !head);
  }
  return Response("404 Not Found", "text/plain", "not found; metrics are at /metrics\n", !head);
}

}  // namespace tensorbroker::daemon
