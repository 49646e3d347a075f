#include "bench/report.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>

#include "bench/units.h"

namespace tensorbroker::bench {

double Percentile(const std::vector<int64_t>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return static_cast<double>(sorted[lo]) * (1 - frac) + static_cast<double>(sorted[hi]) * frac;
}

Summary Summarize(std::vector<int64_t> ns) {
  std::sort(ns.begin(), ns.end());
  Summary s;
  s.n = ns.size();
  s.median = Percentile(ns, 0.5);
  s.p10 = Percentile(ns, 0.1);
  s.p90 = Percentile(ns, 0.9);
  return s;
}

std::string FormatNs(double ns) {
  char buf[32];
  const double a = std::fabs(ns);
  auto fmt3 = [&](double v, const char* unit) {
    if (v >= 100) {
      std::snprintf(buf, sizeof buf, "%.0f %s", v, unit);
    } else if (v >= 10) {
      std::snprintf(buf, sizeof buf, "%.1f %s", v, unit);
    } else {
      std::snprintf(buf, sizeof buf, "%.2f %s", v, unit);
    }
  };
  if (a < 1e3) {
    fmt3(ns, "ns");
  } else if (a < 1e6) {
    fmt3(ns / 1e3, "us");
  } else if (a < 1e9) {
    fmt3(ns / 1e6, "ms");
  } else {
    fmt3(ns / 1e9, "s");
  }
  return buf;
}

// Kept rather than tensorbroker::FormatByteSize (common/byte_size.h): that one prints one
// decimal ("64.0 MiB") and rounds non-multiples ("1.5 GiB"); the bench's table, ratio labels
// and targets print exact integers ("64 MiB", "1536 MiB") and must stay as they were.
std::string FormatSize(uint64_t bytes) {
  char buf[64];
  if (bytes >= kGiB && bytes % kGiB == 0) {
    std::snprintf(buf, sizeof buf, "%" PRIu64 " GiB", bytes / kGiB);
  } else if (bytes >= kMiB && bytes % kMiB == 0) {
    std::snprintf(buf, sizeof buf, "%" PRIu64 " MiB", bytes / kMiB);
  } else if (bytes >= kKiB && bytes % kKiB == 0) {
    std::snprintf(buf, sizeof buf, "%" PRIu64 " KiB", bytes / kKiB);
  } else {
    std::snprintf(buf, sizeof buf, "%" PRIu64 " B", bytes);
  }
  return buf;
}

void Report::Section(const std::string& title) { sections.push_back({title, {}}); }

void Report::Add(const std::string& key, const std::string& label, const std::vector<int64_t>& ns,
                 uint64_t bytes) {
  if (ns.empty()) return;
  sections.back().second.push_back(Row{key, label, Summarize(ns), bytes});
}

void Report::AddSummary(const std::string& key, const std::string& label, const Summary& s) {
  sections.back().second.push_back(Row{key, label, s, 0});
}

void Report::AddFigure(const std::string& key, const std::string& label, double value,
                       const std::string& unit) {
  figures.push_back(Figure{key, label, value, unit});
}

const Row* Report::Find(const std::string& key) const {
  for (const auto& sec : sections) {
    for (const Row& r : sec.second) {
      if (r.key == key) return &r;
    }
  }
  return nullptr;
}

void Report::Fail(const std::string& what, const absl::Status& status) {
  failures.push_back(what + ": " + status.ToString());
  std::fprintf(stderr, "tensorbroker_bench: %s: %s\n", what.c_str(), status.ToString().c_str());
}

}  // namespace tensorbroker::bench
