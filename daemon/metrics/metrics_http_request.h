// The request side of the --metrics-listen HTTP server (metrics_http_server.h): what a
// connection does with the bytes a scraper sends. Bytes accumulate until the request's head is
// complete (a blank line) or too large, then one whole HTTP/1.1 response is made: 200 for GET
// or HEAD of /metrics (the body from `render`) and of /, 404 for other paths, 405 for other
// methods, 400 for a request line that is not "METHOD TARGET HTTP/1.x", 431 past
// kMaxMetricsRequestBytes. Every response says "Connection: close".
//
//   std::string request;
//   if (auto answer = TakeMetricsRequestBytes(&request, received, render)) Send(*answer);
//
// The bytes are untrusted (anyone who can connect); nothing here touches a socket. Pure
// functions of their arguments (and of `render`); thread-safe as `render` is.
#ifndef TENSORBROKER_DAEMON_METRICS_HTTP_REQUEST_H_
#define TENSORBROKER_DAEMON_METRICS_HTTP_REQUEST_H_

#include <cstddef>
#include <optional>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"

namespace tensorbroker::daemon {

// A request head longer than this is answered 431 and not read further.
inline constexpr size_t kMaxMetricsRequestBytes = 8192;

// Appends `received` (the bytes one read brought) to `request` (what came before) and returns
// the response once the head is complete or too large; nullopt while more is needed. Looks for
// the end of the head only where `received` could have completed it, so a client that sends a
// byte at a time costs a few comparisons per byte, not a scan of all it sent.
std::optional<std::string> TakeMetricsRequestBytes(std::string* request, absl::string_view received,
                                                   absl::FunctionRef<std::string()> render);

// The whole response to the complete head `request`; `render` is called only for /metrics.
std::string RespondToMetricsRequest(absl::string_view request,
                                    absl::FunctionRef<std::string()> render);

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_METRICS_HTTP_REQUEST_H_
