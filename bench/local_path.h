// Sections of the bench about the local path: the floor (a raw Unix-socket round trip between
// two processes, C++), the Python figures (bench/python_bench.py, run as a child against the
// same daemon), and 1, 2 and 4 consumer processes cycling Get/release at once (aggregate
// cycles per second and the daemon's CPU time per cycle). Each runs on the caller's thread and
// appends its rows and figures to the Report.
#ifndef TENSORBROKER_BENCH_LOCAL_PATH_H_
#define TENSORBROKER_BENCH_LOCAL_PATH_H_

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "bench/bench_options.h"
#include "bench/report.h"

namespace tensorbroker::bench {

// Row "raw_unix_rtt": a 1-byte SOCK_SEQPACKET ping-pong with a forked echo child.
absl::Status BenchRawRoundTrip(const Options& opt, Report& rep);

// Rows "py_*" as python_bench.py prints them (opt.python with PYTHONPATH=opt.python_path).
absl::Status BenchPython(const Options& opt, const std::string& socket, Report& rep);

// For 1, 2 and 4 children (`self --child-cycles name`): rows "consumers_<k>_cycle" (wall time
// per cycle, all children together) and figures cycles/s and daemon CPU per cycle (when
// `daemon_pid` > 0: read from /proc/<pid>/stat).
absl::Status BenchConsumers(const Options& opt, const std::string& self, const std::string& socket,
                            const std::string& name, pid_t daemon_pid, Report& rep);

// The hidden --child-cycles mode: connect, say "ready", wait for a line on stdin, run
// opt.iterations Get/release cycles of opt.child_cycles, print "done <ns>".
int ChildCycles(const Options& opt);

}  // namespace tensorbroker::bench

#endif  // TENSORBROKER_BENCH_LOCAL_PATH_H_
