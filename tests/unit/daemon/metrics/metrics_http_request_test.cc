// The request side of the --metrics-listen server (daemon/metrics/metrics_http_request.h), without
// a socket: which status each request line gets (200 for GET/HEAD of /metrics and /, 404, 405, 400,
// 431), that HEAD sends no body, that `render` is called for /metrics only, that every response
// says "Connection: close", and how bytes accumulate until the head is complete (a blank line) or
// too large, however the reads split it.
#include "daemon/metrics/metrics_http_request.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace tensorbroker::daemon {
namespace {

// A response taken apart: the status line, the headers by name, the body.
struct ParsedResponse {
  std::string status_line;
  std::map<std::string, std::string> headers;
  std::string body;
};

ParsedResponse Parse(absl::string_view response) {
  ParsedResponse parsed;
  const size_t head_end = response.find("\r\n\r\n");
  EXPECT_NE(head_end, absl::string_view::npos) << response;
  if (head_end == absl::string_view::npos) return parsed;
  const std::vector<absl::string_view> lines = absl::StrSplit(response.substr(0, head_end), "\r\n");
  parsed.status_line = std::string(lines[0]);
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(": ");
    EXPECT_NE(colon, absl::string_view::npos) << lines[i];
    if (colon == absl::string_view::npos) continue;
    EXPECT_EQ(parsed.headers.count(std::string(lines[i].substr(0, colon))), 0u) << lines[i];
    parsed.headers[std::string(lines[i].substr(0, colon))] =
        std::string(lines[i].substr(colon + 2));
  }
  parsed.body = std::string(response.substr(head_end + 4));
  return parsed;
}

// A `render` that counts its calls.
class Renderer {
 public:
  explicit Renderer(std::string text) : text_(std::move(text)) {}
  std::string operator()() {
    ++calls_;
    return text_;
  }
  int calls() const { return calls_; }

 private:
  std::string text_;
  int calls_ = 0;
};

constexpr absl::string_view kMetrics =
    "# HELP tensorbroker_tensors Tensors stored.\n"
    "# TYPE tensorbroker_tensors gauge\n"
    "tensorbroker_tensors 3\n";

// The answer to `request` (a whole head), with `render` answering kMetrics.
ParsedResponse Respond(absl::string_view request, int* render_calls = nullptr) {
  Renderer renderer{std::string(kMetrics)};
  const std::string response = RespondToMetricsRequest(request, [&] { return renderer(); });
  if (render_calls != nullptr) *render_calls = renderer.calls();
  return Parse(response);
}

// Checks what every response has: "Connection: close" and a Content-Length that is the body's
// length, or (HEAD) the length of the body a GET would have had, with no body sent.
void ExpectWellFormed(const ParsedResponse& response, bool head = false, size_t get_body_size = 0) {
  EXPECT_EQ(response.headers.count("Connection"), 1u) << response.status_line;
  EXPECT_EQ(response.headers.count("Connection") ? response.headers.at("Connection") : "", "close");
  ASSERT_EQ(response.headers.count("Content-Length"), 1u) << response.status_line;
  size_t length = 0;
  ASSERT_TRUE(absl::SimpleAtoi(response.headers.at("Content-Length"), &length));
  if (head) {
    EXPECT_EQ(response.body, "");
    EXPECT_EQ(length, get_body_size);
  } else {
    EXPECT_EQ(length, response.body.size());
  }
}

TEST(MetricsHttpRequest, GetMetricsIsAnsweredWithTheRenderedTextInPrometheusFormat) {
  int calls = 0;
  const ParsedResponse response =
      Respond("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:9464\r\nAccept: */*\r\n\r\n", &calls);
  EXPECT_EQ(response.status_line, "HTTP/1.1 200 OK");
  EXPECT_EQ(response.body, kMetrics);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(response.headers.at("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  ExpectWellFormed(response);
}

TEST(MetricsHttpRequest, HeadOfMetricsSaysTheLengthAndSendsNoBody) {
  int calls = 0;
  const ParsedResponse response = Respond("HEAD /metrics HTTP/1.1\r\n\r\n", &calls);
  EXPECT_EQ(response.status_line, "HTTP/1.1 200 OK");
  EXPECT_EQ(calls, 1);
  ExpectWellFormed(response, /*head=*/true, kMetrics.size());
}

TEST(MetricsHttpRequest, HttpOneZeroAndAQueryStringAreStillMetrics) {
  EXPECT_EQ(Respond("GET /metrics HTTP/1.0\r\n\r\n").status_line, "HTTP/1.1 200 OK");
  int calls = 0;
  const ParsedResponse query = Respond("GET /metrics?name[]=x HTTP/1.1\r\n\r\n", &calls);
  EXPECT_EQ(query.status_line, "HTTP/1.1 200 OK");
  EXPECT_EQ(query.body, kMetrics);
  EXPECT_EQ(calls, 1);
}

TEST(MetricsHttpRequest, TheRootIsAnsweredWithoutRenderingAndPointsAtMetrics) {
  int calls = 0;
  const ParsedResponse get = Respond("GET / HTTP/1.1\r\n\r\n", &calls);
  EXPECT_EQ(get.status_line, "HTTP/1.1 200 OK");
  EXPECT_TRUE(absl::StrContains(get.body, "/metrics")) << get.body;
  EXPECT_EQ(calls, 0);
  ExpectWellFormed(get);

  const ParsedResponse head = Respond("HEAD / HTTP/1.1\r\n\r\n", &calls);
  EXPECT_EQ(head.status_line, "HTTP/1.1 200 OK");
  EXPECT_EQ(calls, 0);
  ExpectWellFormed(head, /*head=*/true, get.body.size());
}

TEST(MetricsHttpRequest, OtherPathsAre404WithoutRendering) {
  for (absl::string_view path : {"/metrics/", "/metric", "/Metrics", "/favicon.ico", "*"}) {
    SCOPED_TRACE(path);
    int calls = 0;
    const ParsedResponse get = Respond(absl::StrCat("GET ", path, " HTTP/1.1\r\n\r\n"), &calls);
    EXPECT_EQ(get.status_line, "HTTP/1.1 404 Not Found");
    EXPECT_NE(get.body, "");
    EXPECT_EQ(calls, 0);
    ExpectWellFormed(get);

    const ParsedResponse head = Respond(absl::StrCat("HEAD ", path, " HTTP/1.1\r\n\r\n"), &calls);
    EXPECT_EQ(head.status_line, "HTTP/1.1 404 Not Found");
    EXPECT_EQ(calls, 0);
    ExpectWellFormed(head, /*head=*/true, get.body.size());
  }
}

TEST(MetricsHttpRequest, OtherMethodsAre405NamingTheAllowedOnes) {
  for (absl::string_view method : {"POST", "PUT", "DELETE", "OPTIONS", "get", "Head"}) {
    SCOPED_TRACE(method);
    int calls = 0;
    const ParsedResponse response =
        Respond(absl::StrCat(method, " /metrics HTTP/1.1\r\n\r\n"), &calls);
    EXPECT_EQ(response.status_line, "HTTP/1.1 405 Method Not Allowed");
    EXPECT_EQ(response.headers.count("Allow") ? response.headers.at("Allow") : "", "GET, HEAD");
    EXPECT_EQ(calls, 0);
    ExpectWellFormed(response);
  }
}

TEST(MetricsHttpRequest, ARequestLineThatIsNotMethodTargetVersionIs400) {
  for (absl::string_view line : std::initializer_list<absl::string_view>{
           "", "GET", "GET /metrics", "GET /metrics HTTP/2.0", "GET /metrics HTTP/1.1 extra",
           "GET  /metrics HTTP/1.1", "GET /metrics http/1.1", "GET /metrics SPDY/3",
           absl::string_view("GET\0/metrics\0HTTP/1.1", 21), "\x16\x03\x01"}) {
    SCOPED_TRACE(line);
    int calls = 0;
    const ParsedResponse response = Respond(absl::StrCat(line, "\r\n\r\n"), &calls);
    EXPECT_EQ(response.status_line, "HTTP/1.1 400 Bad Request");
    EXPECT_NE(response.body, "");
    EXPECT_EQ(calls, 0);
    ExpectWellFormed(response);
  }
}

TEST(MetricsHttpRequest, OnlyTheRequestLineDecides) {
  // Headers, whatever they say, and bare LF line ends.
  EXPECT_EQ(Respond("GET /metrics HTTP/1.1\nHost: x\nX: POST / HTTP/1.1\n\n").status_line,
            "HTTP/1.1 200 OK");
  EXPECT_EQ(Respond("POST /metrics HTTP/1.1\r\nX-Method: GET\r\n\r\n").status_line,
            "HTTP/1.1 405 Method Not Allowed");
}

TEST(MetricsHttpRequest, BytesAccumulateUntilTheHeadIsComplete) {
  Renderer renderer{std::string(kMetrics)};
  std::string request;
  EXPECT_EQ(TakeMetricsRequestBytes(&request, "", [&] { return renderer(); }), std::nullopt);
  EXPECT_EQ(
      TakeMetricsRequestBytes(&request, "GET /metrics HTTP/1.1\r\n", [&] { return renderer(); }),
      std::nullopt);
  EXPECT_EQ(TakeMetricsRequestBytes(&request, "Host: x\r\n", [&] { return renderer(); }),
            std::nullopt);
  EXPECT_EQ(request, "GET /metrics HTTP/1.1\r\nHost: x\r\n");
  EXPECT_EQ(renderer.calls(), 0);
  const std::optional<std::string> response =
      TakeMetricsRequestBytes(&request, "\r\n", [&] { return renderer(); });
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(renderer.calls(), 1);
  EXPECT_EQ(*response, RespondToMetricsRequest("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
                                               [] { return std::string(kMetrics); }));
}

TEST(MetricsHttpRequest, AHeadSplitAnywhereIsAnsweredWhenItsLastByteArrives) {
  for (absl::string_view whole : {absl::string_view("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
                                  absl::string_view("GET / HTTP/1.0\n\n"),
                                  absl::string_view("POST /metrics HTTP/1.1\r\n\r\n")}) {
    const std::string expected =
        RespondToMetricsRequest(whole, [] { return std::string(kMetrics); });
    // One byte at a time.
    {
      SCOPED_TRACE(absl::StrCat("a byte at a time: ", whole));
      std::string request;
      for (size_t i = 0; i + 1 < whole.size(); ++i) {
        ASSERT_EQ(TakeMetricsRequestBytes(&request, whole.substr(i, 1),
                                          [] { return std::string(kMetrics); }),
                  std::nullopt)
            << "answered after " << i + 1 << " bytes";
      }
      EXPECT_EQ(TakeMetricsRequestBytes(&request, whole.substr(whole.size() - 1),
                                        [] { return std::string(kMetrics); }),
                expected);
    }
    // Two reads, split at every place (the blank line's bytes in both reads included).
    for (size_t split = 0; split < whole.size(); ++split) {
      SCOPED_TRACE(absl::StrCat("split at ", split, ": ", whole));
      std::string request;
      ASSERT_EQ(TakeMetricsRequestBytes(&request, whole.substr(0, split),
                                        [] { return std::string(kMetrics); }),
                std::nullopt);
      EXPECT_EQ(TakeMetricsRequestBytes(&request, whole.substr(split),
                                        [] { return std::string(kMetrics); }),
                expected);
    }
  }
}

TEST(MetricsHttpRequest, AHeadOfTheLimitIsAnsweredAndOneLongerIs431) {
  const std::string line = "GET /metrics HTTP/1.1\r\n";
  const std::string end = "\r\n";
  // Exactly kMaxMetricsRequestBytes, blank line included: answered as usual.
  {
    const std::string header =
        "X: " + std::string(kMaxMetricsRequestBytes - line.size() - end.size() - 5, 'a') + "\r\n";
    const std::string whole = line + header + end;
    ASSERT_EQ(whole.size(), kMaxMetricsRequestBytes);
    std::string request;
    ASSERT_EQ(TakeMetricsRequestBytes(&request, whole.substr(0, whole.size() - 1),
                                      [] { return std::string(kMetrics); }),
              std::nullopt);
    const std::optional<std::string> response = TakeMetricsRequestBytes(
        &request, whole.substr(whole.size() - 1), [] { return std::string(kMetrics); });
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ(Parse(*response).status_line, "HTTP/1.1 200 OK");
  }
  // kMaxMetricsRequestBytes without the end of the head: the head is longer, so 431, without
  // rendering.
  {
    const std::string filler(kMaxMetricsRequestBytes - line.size(), 'a');
    std::string request;
    Renderer renderer{std::string(kMetrics)};
    ASSERT_EQ(TakeMetricsRequestBytes(&request, line, [&] { return renderer(); }), std::nullopt);
    ASSERT_EQ(TakeMetricsRequestBytes(&request, filler.substr(0, filler.size() - 1),
                                      [&] { return renderer(); }),
              std::nullopt);
    const std::optional<std::string> response = TakeMetricsRequestBytes(
        &request, filler.substr(filler.size() - 1), [&] { return renderer(); });
    ASSERT_TRUE(response.has_value());
    const ParsedResponse parsed = Parse(*response);
    EXPECT_EQ(parsed.status_line, "HTTP/1.1 431 Request Header Fields Too Large");
    EXPECT_NE(parsed.body, "");
    EXPECT_EQ(renderer.calls(), 0);
    ExpectWellFormed(parsed);
  }
  // A longer head that comes whole in one read: 431 too, without rendering.
  {
    const std::string header = "X: " + std::string(kMaxMetricsRequestBytes, 'a') + "\r\n";
    std::string request;
    Renderer renderer{std::string(kMetrics)};
    const std::optional<std::string> response =
        TakeMetricsRequestBytes(&request, line + header + end, [&] { return renderer(); });
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ(Parse(*response).status_line, "HTTP/1.1 431 Request Header Fields Too Large");
    EXPECT_EQ(renderer.calls(), 0);
  }
  // Garbage without a line end at all, in large reads: 431 at the read that reaches the limit.
  {
    std::string request;
    const std::string chunk(1000, '\x01');
    std::optional<std::string> response;
    size_t reads = 0;
    while (!response.has_value() && reads < 100) {
      response = TakeMetricsRequestBytes(&request, chunk, [] { return std::string(kMetrics); });
      ++reads;
    }
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ(reads, (kMaxMetricsRequestBytes + chunk.size() - 1) / chunk.size());
    EXPECT_EQ(Parse(*response).status_line, "HTTP/1.1 431 Request Header Fields Too Large");
  }
}

}  // namespace
}  // namespace tensorbroker::daemon
