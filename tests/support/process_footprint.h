// What a process holds, from /proc/<pid>: open descriptors, threads, and resident memory (its
// own anonymous pages apart from the shared memory it has touched). For the soak tests and the
// load bench, which check that a daemon's footprint comes back after many clients came and died.
#ifndef TENSORBROKER_TESTS_SUPPORT_PROCESS_FOOTPRINT_H_
#define TENSORBROKER_TESTS_SUPPORT_PROCESS_FOOTPRINT_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace tensorbroker::testing {

struct ProcessFootprint {
  size_t fds = 0;
  size_t threads = 0;
  size_t rss_anon_kib = 0;   // RssAnon: heap, stacks, the allocator's caches
  size_t rss_shmem_kib = 0;  // RssShmem: shared memory pages it touched
};

// All zero when the process is gone.
ProcessFootprint FootprintOf(pid_t pid);

// Under ASan freed memory waits in a quarantine before it is reused (256 MiB by default), which
// RssAnon would count as growth. Call before starting the processes to measure: they keep a
// small one instead (ASAN_OPTIONS), so use-after-free is still caught in the 16 MiB most
// recently freed, and what RSS shows beyond that is growth, as in a plain build. Later
// ASAN_OPTIONS entries win. Harmless without ASan.
void KeepAsanQuarantineSmall();

// utime + stime of `pid` from /proc/<pid>/stat, in nanoseconds (clock-tick resolution); -1
// when unreadable.
int64_t CpuTimeNs(pid_t pid);

// "fds 14, threads 9, RssAnon 21.3 MiB, RssShmem 0.0 MiB"
std::string Describe(const ProcessFootprint& footprint);

}  // namespace tensorbroker::testing

#endif  // TENSORBROKER_TESTS_SUPPORT_PROCESS_FOOTPRINT_H_
