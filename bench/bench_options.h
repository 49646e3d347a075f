// Command-line flags of tensorbroker_bench: the Options struct, --help text and parsing.
// Options is a plain value owned by main(); parsing runs once on the main thread.
#ifndef TENSORBROKER_BENCH_BENCH_OPTIONS_H_
#define TENSORBROKER_BENCH_BENCH_OPTIONS_H_

#include <cstdint>
#include <string>

#include "bench/units.h"

#ifndef TENSORBROKERD_PATH
#define TENSORBROKERD_PATH "tensorbrokerd"
#endif

#ifndef TENSORBROKER_PYTHON_BENCH
#define TENSORBROKER_PYTHON_BENCH ""
#endif
#ifndef TENSORBROKER_PYTHON_PATH
#define TENSORBROKER_PYTHON_PATH ""
#endif

namespace tensorbroker::bench {

struct Options {
  std::string socket;  // empty: start our own daemon
  std::string daemon = TENSORBROKERD_PATH;
  std::string capacity = "6G";  // passed to our own daemon
  int iterations = 2000;        // small ops (Ping, Get/release)
  int warmup = -1;              // small ops; -1: iterations / 10
  int large_iterations = 5;     // 1 GiB ops
  int large_warmup = 1;
  uint64_t size_small = 4 * kKiB;
  uint64_t size_large = kGiB;
  uint64_t chunk = kMiB;    // gRPC Put data chunk
  int pin_cpu = -1;         // bench process
  int pin_daemon_cpu = -2;  // -2: same as --pin-cpu; -1: not pinned
  bool json = false;
  std::string child_read;    // hidden: consumer child mode
  std::string child_cycles;  // hidden: cycling consumer child mode
  // The Python figures: this interpreter runs python_bench.py with PYTHONPATH (empty: skipped).
  std::string python = "/usr/bin/python3";
  std::string python_bench = TENSORBROKER_PYTHON_BENCH;
  std::string python_path = TENSORBROKER_PYTHON_PATH;
};

// Prints the --help text to stdout.
void Usage(const char* argv0);

// Fills `opt` from argv and resolves the defaults that depend on other flags. Prints the
// problem to stderr and returns false on a bad flag; --help prints Usage and exits 0.
bool ParseArgs(int argc, char** argv, Options* opt);

}  // namespace tensorbroker::bench

#endif  // TENSORBROKER_BENCH_BENCH_OPTIONS_H_
