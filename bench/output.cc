#include "bench/output.h"

#include <cstdio>
#include <thread>
#include <utility>

#include "bench/units.h"

namespace tensorbroker::bench {
namespace {

// Width of the table's label column; the rules under the headings are kWidth + 54 wide.
constexpr int kWidth = 58;

std::string Rate(uint64_t bytes, double ns) {
  if (bytes == 0 || ns <= 0) return "";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB/s",
                static_cast<double>(bytes) / static_cast<double>(kGiB) / (ns / 1e9));
  return buf;
}

std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::optional<double> RatioOf(const Report& rep, const std::string& num, const std::string& den) {
  const Row* a = rep.Find(num);
  const Row* b = rep.Find(den);
  if (a == nullptr || b == nullptr || b->s.median <= 0) return std::nullopt;
  return a->s.median / b->s.median;
}

std::vector<Ratio> ComputeRatios(const Report& rep, uint64_t size_small, uint64_t size_large) {
  const std::string ssz = FormatSize(size_small), lsz = FormatSize(size_large);
  std::vector<Ratio> ratios;
  // Targets: at most `limit` times the floor.
  auto at_most = [&](const std::string& key, const std::string& label, const std::string& num,
                     const std::string& den, double limit, const std::string& target) {
    Ratio r{key, label, target, RatioOf(rep, num, den), std::nullopt};
    if (r.value) r.met = *r.value <= limit;
    ratios.push_back(r);
  };
  at_most("get_small_over_raw_rtt", "C++ Get(" + ssz + ") / C++ raw round trip", "small_get",
          "raw_unix_rtt", 1.5, "C++ Get <= 1.5x raw round trip");
  at_most("py_cycle_over_py_rtt", "Python cycle / Python raw round trip", "py_cycle", "py_raw_rtt",
          2.0, "cycle <= 2x raw round trip");
  at_most("py_extra_view_over_py_rtt", "Python extra view / Python raw round trip", "py_extra_view",
          "py_raw_rtt", 0.25, "extra view <= 0.25x");
  at_most("py_release_over_py_rtt", "Python release() / Python raw round trip", "py_release",
          "py_raw_rtt", 0.25, "release() <= 0.25x");
  ratios.push_back(Ratio{"py_cycle_over_shm_attach", "Python cycle / shared_memory attach by name",
                         "", RatioOf(rep, "py_cycle", "py_shm_attach"), std::nullopt});
  ratios.push_back(Ratio{"get_small_over_ping", "C++ Get(" + ssz + ") / gRPC Ping", "",
                         RatioOf(rep, "small_get", "ping"), std::nullopt});
  {
    Ratio r{"get_large_over_get_small", "Get(" + lsz + ") / Get(" + ssz + ")",
            lsz + " Get <= 1.2x " + ssz + " Get", RatioOf(rep, "large_get", "small_get"),
            std::nullopt};
    if (r.value) r.met = *r.value <= 1.2;
    ratios.push_back(r);
  }
  {
    Ratio r{"grpc_put_over_zero_copy", "gRPC Put / zero-copy (" + lsz + ")",
            "zero-copy >= 20x faster than gRPC bytes at " + lsz,
            RatioOf(rep, "grpc_put_large", "zero_copy_large"), std::nullopt};
    if (r.value) r.met = *r.value >= 20;
    ratios.push_back(r);
  }
  ratios.push_back(Ratio{"get_release_small_over_ping", "Get+release(" + ssz + ") / Ping", "",
                         RatioOf(rep, "small_get_release", "ping"), std::nullopt});
  ratios.push_back(Ratio{"grpc_read_over_zero_copy", "gRPC Read / zero-copy (" + lsz + ")", "",
                         RatioOf(rep, "grpc_read_large", "zero_copy_large"), std::nullopt});
  ratios.push_back(Ratio{"grpc_put_over_zero_copy_fill", "gRPC Put / zero-copy fill alone", "",
                         RatioOf(rep, "grpc_put_large", "zero_copy_large_fill"), std::nullopt});
  ratios.push_back(Ratio{
      "child_first_read_over_local_warm_read", "consumer first read / local written buffer read",
      "", RatioOf(rep, "child_first_read_large", "local_warm_read_large"), std::nullopt});
  ratios.push_back(Ratio{
      "child_first_read_over_local_fresh_read", "consumer first read / fresh malloc first read", "",
      RatioOf(rep, "child_first_read_large", "local_fresh_read_large"), std::nullopt});
  return ratios;
}

void PrintTable(const Report& rep) {
  std::printf("%-*s %10s %10s %10s %7s  %s\n", kWidth, "measurement", "median", "p10", "p90",
              "iters", "rate@median");
  std::printf("%s\n", std::string(kWidth + 54, '-').c_str());
  for (const auto& [title, rows] : rep.sections) {
    std::printf("%s\n", title.c_str());
    if (rows.empty()) std::printf("  (no figures: see the errors below)\n");
    for (const Row& r : rows) {
      std::printf("  %-*s %10s %10s %10s %7zu  %s\n", kWidth - 2, r.label.c_str(),
                  FormatNs(r.s.median).c_str(), FormatNs(r.s.p10).c_str(),
                  FormatNs(r.s.p90).c_str(), r.s.n, Rate(r.bytes, r.s.median).c_str());
    }
  }
}

void PrintFigures(const Report& rep) {
  if (rep.figures.empty()) return;
  std::printf("\nfigures\n");
  std::printf("%s\n", std::string(kWidth + 54, '-').c_str());
  for (const Figure& f : rep.figures) {
    std::printf("  %-*s %12.1f %s\n", kWidth - 2, f.label.c_str(), f.value, f.unit.c_str());
  }
}

void PrintRatios(const std::vector<Ratio>& ratios) {
  std::printf("\nratios (of medians)\n");
  std::printf("%s\n", std::string(kWidth + 54, '-').c_str());
  for (const Ratio& r : ratios) {
    char val[32];
    if (r.value) {
      std::snprintf(val, sizeof val, "%.2fx", *r.value);
    } else {
      std::snprintf(val, sizeof val, "n/a");
    }
    const std::string verdict =
        r.target.empty() ? "(informational)" : (!r.met ? "n/a" : (*r.met ? "met" : "not met"));
    std::printf("  %-48s %9s   %-9s %s\n", r.label.c_str(), val, verdict.c_str(),
                r.target.empty() ? "" : ("target: " + r.target).c_str());
  }
}

std::string ToJson(const Options& opt, const std::string& pin_mode, const Report& rep,
                   const std::vector<Ratio>& ratios) {
  std::string j = "{\"config\":{";
  j += "\"iterations\":" + std::to_string(opt.iterations);
  j += ",\"warmup\":" + std::to_string(opt.warmup);
  j += ",\"large_iterations\":" + std::to_string(opt.large_iterations);
  j += ",\"large_warmup\":" + std::to_string(opt.large_warmup);
  j += ",\"size_small\":" + std::to_string(opt.size_small);
  j += ",\"size_large\":" + std::to_string(opt.size_large);
  j += ",\"chunk\":" + std::to_string(opt.chunk);
  j += ",\"pin_cpu\":" + std::to_string(opt.pin_cpu);
  j += ",\"pin_daemon_cpu\":" + std::to_string(opt.socket.empty() ? opt.pin_daemon_cpu : -1);
  j += ",\"pinning\":\"" + JsonEscape(pin_mode) + "\"";
  j += ",\"cpus\":" + std::to_string(std::thread::hardware_concurrency());
  j += ",\"external_daemon\":" + std::string(opt.socket.empty() ? "false" : "true");
  j += "},\"measurements\":{";
  bool first = true;
  char buf[256];
  for (const auto& sec : rep.sections) {
    for (const Row& r : sec.second) {
      std::snprintf(buf, sizeof buf,
                    "\"median_ns\":%.1f,\"p10_ns\":%.1f,\"p90_ns\":%.1f,\"iterations\":%zu",
                    r.s.median, r.s.p10, r.s.p90, r.s.n);
      j += std::string(first ? "" : ",") + "\"" + r.key + "\":{" + buf;
      if (r.bytes > 0) j += ",\"bytes\":" + std::to_string(r.bytes);
      j += "}";
      first = false;
    }
  }
  j += "},\"figures\":{";
  first = true;
  for (const Figure& f : rep.figures) {
    std::snprintf(buf, sizeof buf, "%.3f", f.value);
    j += std::string(first ? "" : ",") + "\"" + f.key + "\":{\"value\":" + buf + ",\"unit\":\"" +
         JsonEscape(f.unit) + "\"}";
    first = false;
  }
  j += "},\"ratios\":{";
  first = true;
  for (const Ratio& r : ratios) {
    j += std::string(first ? "" : ",") + "\"" + r.key + "\":{\"value\":";
    if (r.value) {
      std::snprintf(buf, sizeof buf, "%.4f", *r.value);
      j += buf;
    } else {
      j += "null";
    }
    if (!r.target.empty()) {
      j += ",\"target\":\"" + JsonEscape(r.target) + "\",\"met\":";
      j += r.met ? (*r.met ? "true" : "false") : "null";
    }
    j += "}";
    first = false;
  }
  j += "},\"errors\":[";
  for (size_t i = 0; i < rep.failures.size(); ++i) {
    j += (i ? ",\"" : "\"") + JsonEscape(rep.failures[i]) + "\"";
  }
  j += "]}";
  return j;
}

}  // namespace tensorbroker::bench
