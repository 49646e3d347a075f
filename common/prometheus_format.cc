#include "common/prometheus_format.h"

#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/stats_schema.h"
#include "tensorbroker/dtype_names.h"

namespace tensorbroker {
namespace {

void Header(std::string* out, const char* name, const char* type, const char* help) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}

// Shortest text that reads back as the same double.
std::string Number(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.17g", value);
  for (int precision = 1; precision <= 17; ++precision) {
    char shorter[32];
    std::snprintf(shorter, sizeof(shorter), "%.*g", precision, value);
    double back = 0;
    if (std::sscanf(shorter, "%lf", &back) == 1 && back == value) return shorter;
  }
  return buffer;
}

// Label values: method names and codes are [A-Za-z0-9_./], but escape as the format says.
std::string Escaped(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  return out;
}

}  // namespace

std::string PrometheusText(const BrokerStats& stats) {
  std::string out;
  Header(&out, "tensorbroker_pool_info", "gauge",
         "1 per memory pool; handles says how clients reach its memory (memfd, cuda-vmm or "
         "cuda-ipc).");
  for (const PoolUsage& pool : stats.pools) {
    absl::StrAppend(&out, "tensorbroker_pool_info{device=\"", Escaped(DeviceName(pool.device)),
                    "\",handles=\"", Escaped(pool.handles), "\"} 1\n");
  }
  for (const auto& row : kPoolStatsFields) {
    Header(&out, row.prometheus, "gauge", row.help);
    for (const PoolUsage& pool : stats.pools) {
      absl::StrAppend(&out, row.prometheus, "{device=\"", Escaped(DeviceName(pool.device)), "\"} ",
                      pool.*row.member, "\n");
    }
  }
  for (const auto& row : kBrokerStatsFields) {
    if (row.prometheus == nullptr) continue;  // the CPU pool's figure, exported per pool above
    Header(&out, row.prometheus, "gauge", row.help);
    absl::StrAppend(&out, row.prometheus, " ", stats.*row.member, "\n");
  }
  for (const auto& row : kUserStatsFields) {
    Header(&out, row.prometheus, "gauge", row.help);
    for (const UserUsage& user : stats.users) {
      absl::StrAppend(&out, row.prometheus, "{uid=\"", user.uid, "\",user=\"", Escaped(user.user),
                      "\"} ", user.*row.member, "\n");
    }
  }
  for (const auto& row : kPeerStatsFields) {
    Header(&out, row.prometheus, "counter", row.help);
    for (const PeerUsage& peer : stats.peers) {
      absl::StrAppend(&out, row.prometheus, "{peer=\"", Escaped(peer.peer), "\"} ",
                      peer.*row.member, "\n");
    }
  }
  for (const auto& row : kRemoteStatsFields) {
    const bool counter = absl::EndsWith(row.prometheus, "_total");
    Header(&out, row.prometheus, counter ? "counter" : "gauge", row.help);
    for (const RemoteUsage& remote : stats.remotes) {
      absl::StrAppend(&out, row.prometheus, "{peer=\"", Escaped(remote.peer), "\"} ",
                      remote.*row.member, "\n");
    }
  }
  Header(&out, "tensorbroker_calls_total", "counter",
         "gRPC calls answered, by method and status code.");
  for (const MethodStats& method : stats.methods) {
    for (const auto& [code, count] : method.calls) {
      absl::StrAppend(&out, "tensorbroker_calls_total{method=\"", Escaped(method.method),
                      "\",code=\"", absl::StatusCodeToString(static_cast<absl::StatusCode>(code)),
                      "\"} ", count, "\n");
    }
  }
  Header(&out, "tensorbroker_call_duration_seconds", "histogram",
         "Time from a call's start to its status, by method (the Session stream excluded).");
  for (const MethodStats& method : stats.methods) {
    if (method.latency_count == 0) continue;
    const std::string label = absl::StrCat("method=\"", Escaped(method.method), "\"");
    uint64_t cumulative = 0;
    for (size_t i = 0; i < method.bucket_counts.size(); ++i) {
      cumulative += method.bucket_counts[i];
      const std::string le = i < method.bucket_bounds_seconds.size()
                                 ? absl::StrCat(method.bucket_bounds_seconds[i])  // "10", "5e-05"
                                 : std::string("+Inf");
      absl::StrAppend(&out, "tensorbroker_call_duration_seconds_bucket{", label, ",le=\"", le,
                      "\"} ", cumulative, "\n");
    }
    absl::StrAppend(&out, "tensorbroker_call_duration_seconds_sum{", label, "} ",
                    Number(method.latency_sum_seconds), "\n");
    absl::StrAppend(&out, "tensorbroker_call_duration_seconds_count{", label, "} ",
                    method.latency_count, "\n");
  }
  return out;
}

}  // namespace tensorbroker
