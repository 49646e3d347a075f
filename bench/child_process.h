// Child processes of the benches: fork()ed and at once exec()ed (the parent runs gRPC
// threads), with stdin and stdout on pipes for a line protocol ("ready", "go", "done ...").
// And the CPU time a process has used, from /proc. One owner per Child; not thread-safe.
#ifndef TENSORBROKER_BENCH_CHILD_PROCESS_H_
#define TENSORBROKER_BENCH_CHILD_PROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tensorbroker::bench {

struct Child {
  pid_t pid = -1;
  FILE* in = nullptr;   // its stdin
  FILE* out = nullptr;  // its stdout
};

// Runs `args` (args[0] a path) with `env` ("NAME=value") added.
absl::StatusOr<Child> Spawn(const std::vector<std::string>& args,
                            const std::vector<std::string>& env = {});

// The next line from `f` without its newline; "" at EOF.
std::string ReadLine(FILE* f);

// Closes the child's pipes and waits for it; returns its wait status.
int Reap(Child& child);

// utime + stime of `pid`, in nanoseconds; -1 when unreadable.
int64_t CpuNs(pid_t pid);

}  // namespace tensorbroker::bench

#endif  // TENSORBROKER_BENCH_CHILD_PROCESS_H_
