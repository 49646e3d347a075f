// Section 4 of the bench: the first full read of the large tensor by a fresh consumer process
// (the bench re-executed in the hidden --child-read mode) versus reading local memory. Runs on
// the caller's thread; each child process is started, read and reaped within one call.
#ifndef TENSORBROKER_BENCH_FIRST_READ_H_
#define TENSORBROKER_BENCH_FIRST_READ_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "bench/bench_options.h"
#include "bench/report.h"

namespace tensorbroker::bench {

// The hidden --child-read mode: Get, time the full read, print the numbers, exit.
int ChildRead(const Options& opt);

// This executable's path (/proc/self/exe), or `argv0` if that cannot be read.
std::string SelfPath(const char* argv0);

// Runs `self --child-read name --socket socket` opt.large_warmup + opt.large_iterations times
// and checks each child's sum, then times full reads of `src` and of fresh anonymous mappings.
absl::Status BenchFirstRead(const Options& opt, const std::string& self, const std::string& socket,
                            const std::string& name, const unsigned char* src,
                            uint64_t expected_sum, Report& rep);

}  // namespace tensorbroker::bench

#endif  // TENSORBROKER_BENCH_FIRST_READ_H_
