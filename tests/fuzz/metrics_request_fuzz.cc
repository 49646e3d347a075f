// Feeds: bytes a scraper sends to --metrics-listen, to TakeMetricsRequestBytes
// (daemon/metrics/metrics_http_request.h), in reads of the size the first byte picks (0: 1024, the
// server's read buffer; else 1 to 255 bytes), as the server's connection does until it has an
// answer.
// Asserts: the answer comes exactly at the read where the bytes so far first hold a blank line
// ("\r\n\r\n" or "\n\n", found here by a full scan) or reach kMaxMetricsRequestBytes; it is one
// HTTP/1.1 response with a known status, "Connection: close", and a Content-Length that the body
// matches (no body for HEAD); only a 200 for /metrics renders the metrics.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/metrics/metrics_http_request.h"
#include "tests/fuzz/fuzz_support.h"

namespace tensorbroker::daemon {
namespace {

constexpr absl::string_view kMetrics = "# TYPE tensorbroker_up gauge\ntensorbroker_up 1\n";

bool HeadComplete(absl::string_view request) {
  return absl::StrContains(request, "\r\n\r\n") || absl::StrContains(request, "\n\n");
}

void CheckAnswer(absl::string_view request, const std::string& answer, int renders) {
  FUZZ_CHECK(absl::StartsWith(answer, "HTTP/1.1 "), "answer '%s'", answer.c_str());
  const absl::string_view status = absl::string_view(answer).substr(9, 3);
  FUZZ_CHECK(
      status == "200" || status == "400" || status == "404" || status == "405" || status == "431",
      "status %s", std::string(status).c_str());
  const size_t head_end = answer.find("\r\n\r\n");
  FUZZ_CHECK(head_end != std::string::npos, "answer has no end of head");
  const absl::string_view head = absl::string_view(answer).substr(0, head_end + 2);
  const absl::string_view body = absl::string_view(answer).substr(head_end + 4);
  FUZZ_CHECK(absl::StrContains(head, "\r\nConnection: close\r\n"), "no Connection: close");
  const size_t at = head.find("\r\nContent-Length: ");
  FUZZ_CHECK(at != absl::string_view::npos, "no Content-Length");
  const absl::string_view value = head.substr(at + 18, head.find("\r\n", at + 18) - at - 18);
  size_t length = 0;
  FUZZ_CHECK(absl::SimpleAtoi(value, &length), "Content-Length '%s'", std::string(value).c_str());
  // The method as the request line (leading whitespace stripped) starts.
  const absl::string_view line =
      absl::StripLeadingAsciiWhitespace(request.substr(0, request.find('\n')));
  const bool head_request = absl::StartsWith(line, "HEAD ");
  const bool without_body = head_request && (status == "200" || status == "404");
  FUZZ_CHECK(body.size() == (without_body ? 0 : length), "body of %zu bytes, length %zu%s",
             body.size(), length, without_body ? " (HEAD)" : "");
  FUZZ_CHECK(renders == 0 || (status == "200" && length == kMetrics.size()),
             "metrics rendered for a %s", std::string(status).c_str());
  FUZZ_CHECK(renders <= 1, "rendered %d times", renders);
  if (status == "200") {
    FUZZ_CHECK(absl::StartsWith(line, "GET ") || head_request, "200 for another method");
  }
}

}  // namespace
}  // namespace tensorbroker::daemon

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tensorbroker::daemon;
  if (size == 0) return 0;
  const size_t read_size = data[0] == 0 ? 1024 : data[0];
  absl::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string request;
  int renders = 0;
  auto render = [&] {
    ++renders;
    return std::string(kMetrics);
  };
  while (!rest.empty()) {
    const absl::string_view received = rest.substr(0, read_size);
    rest.remove_prefix(received.size());
    const std::string before = request;
    std::optional<std::string> answer = TakeMetricsRequestBytes(&request, received, render);
    const std::string all = before + std::string(received);
    const bool due = HeadComplete(all) || all.size() >= kMaxMetricsRequestBytes;
    FUZZ_CHECK(answer.has_value() == due, "answer %s after %zu bytes",
               answer.has_value() ? "given" : "missing", all.size());
    FUZZ_CHECK(request == all, "the request bytes were not kept as sent");
    if (answer.has_value()) {
      CheckAnswer(all, *answer, renders);
      break;  // the server answers once, then only drains
    }
  }
  return 0;
}
