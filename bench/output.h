// Printing a finished Report: the table, the ratios block (design targets) and the --json
// object. Read-only over the Report; called once from main() after all measurements.
#ifndef TENSORBROKER_BENCH_OUTPUT_H_
#define TENSORBROKER_BENCH_OUTPUT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_options.h"
#include "bench/report.h"

namespace tensorbroker::bench {

struct Ratio {
  std::string key, label, target;  // target empty: informational
  std::optional<double> value;
  std::optional<bool> met;
};

// Median of row `num` over median of row `den`; nullopt if either is missing.
std::optional<double> RatioOf(const Report& rep, const std::string& num, const std::string& den);

// The fixed list of ratios (three with targets, the rest informational).
std::vector<Ratio> ComputeRatios(const Report& rep, uint64_t size_small, uint64_t size_large);

// Prints the table of all sections and rows to stdout.
void PrintTable(const Report& rep);

// Prints the "ratios (of medians)" block to stdout.
// The figures block (rates, CPU per operation); nothing when there are none.
void PrintFigures(const Report& rep);
void PrintRatios(const std::vector<Ratio>& ratios);

// The one-line JSON object printed with --json.
std::string ToJson(const Options& opt, const std::string& pin_mode, const Report& rep,
                   const std::vector<Ratio>& ratios);

}  // namespace tensorbroker::bench

#endif  // TENSORBROKER_BENCH_OUTPUT_H_
