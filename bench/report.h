// The figures collected during a run: per-row percentiles in titled sections, plus the errors.
// Also the number formatting shared by the table and the daemon's stop message. Report is owned
// by main() and filled from the main thread only.
#ifndef TENSORBROKER_BENCH_REPORT_H_
#define TENSORBROKER_BENCH_REPORT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace tensorbroker::bench {

struct Summary {
  double median = 0, p10 = 0, p90 = 0;
  size_t n = 0;
};

// Linear interpolation between the closest ranks of an ascending vector; 0 when empty.
double Percentile(const std::vector<int64_t>& sorted, double q);
Summary Summarize(std::vector<int64_t> ns);

// "137 us", "85.3 ms", "5.99 ms": three significant digits, unit ns/us/ms/s.
std::string FormatNs(double ns);

// "64 MiB", "4 KiB", "1536 MiB", "4097 B": the largest binary unit that divides `bytes`
// exactly, as an integer. Deliberately not tensorbroker::FormatByteSize ("64.0 MiB",
// "1.5 GiB"): row labels and ratio labels print sizes this way and must not change.
std::string FormatSize(uint64_t bytes);

struct Row {
  std::string key;    // JSON key
  std::string label;  // table text
  Summary s;
  uint64_t bytes = 0;  // moved per iteration, for a rate column (0: none)
};

// A figure that is not a latency (a rate, a CPU time per operation).
struct Figure {
  std::string key, label;
  double value = 0;
  std::string unit;
};

struct Report {
  std::vector<std::pair<std::string, std::vector<Row>>> sections;
  std::vector<Figure> figures;
  std::vector<std::string> failures;

  // Starts a new section; Add appends to the last one.
  void Section(const std::string& title);
  // Adds a row summarising `ns` (nothing when `ns` is empty).
  void Add(const std::string& key, const std::string& label, const std::vector<int64_t>& ns,
           uint64_t bytes = 0);
  // Adds a row summarised elsewhere (a child process's figures).
  void AddSummary(const std::string& key, const std::string& label, const Summary& s);
  void AddFigure(const std::string& key, const std::string& label, double value,
                 const std::string& unit);
  const Row* Find(const std::string& key) const;
  // Records an error (and prints it to stderr at once).
  void Fail(const std::string& what, const absl::Status& status);
};

}  // namespace tensorbroker::bench

#endif  // TENSORBROKER_BENCH_REPORT_H_
