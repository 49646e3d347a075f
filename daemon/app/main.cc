// tensorbrokerd: see DaemonUsage() (daemon_options.cc) or run with --help.
#include <malloc.h>

#include <cstdio>
#include <string>

#include "daemon/app/daemon_options.h"
#include "daemon/app/daemon_runner.h"
#include "daemon/base/log.h"

namespace {

// Keeps freed message memory for the next message: a Read stream's 1 MiB chunks (serving a peer,
// or a replica's fetch) would otherwise each be mapped anew and unmapped after, every page
// faulting again (dear on a VM). Allocations under 16 MiB come from the heap, and up to 64 MiB
// free at the top of each malloc arena stays (glibc: at most 8 arenas per core), so the bound on
// memory kept this way is 64 MiB times the arenas. Tensors live in shared memory, not here.
void KeepFreedMessageMemory() {
  (void)::mallopt(M_MMAP_THRESHOLD, 16 << 20);
  (void)::mallopt(M_TRIM_THRESHOLD, 64 << 20);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tensorbroker::daemon;
  KeepFreedMessageMemory();
  auto command_line = ParseCommandLine(argc, argv);
  if (!command_line.ok()) {
    std::fprintf(stderr, "tensorbrokerd: %s\n",
                 std::string(command_line.status().message()).c_str());
    return 2;
  }
  if (command_line->help) {
    std::fputs(DaemonUsage().c_str(), stdout);
    return 0;
  }
  const uint64_t default_capacity = DefaultCapacityBytes();
  auto options = LoadDaemonOptions(*command_line, default_capacity);
  if (!options.ok()) {
    std::fprintf(stderr, "tensorbrokerd: %s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  if (command_line->print_config) {
    std::fputs(FormatConfig(*options).c_str(), stdout);
    return 0;
  }
  // SIGHUP: the same file and flags, read again.
  auto reload = [&] { return LoadDaemonOptions(*command_line, default_capacity); };
  absl::Status status = RunDaemon(*options, reload);
  if (!status.ok()) {
    LogLine(LogLevel::kError, "tensorbrokerd: " + std::string(status.message()));
    return 1;
  }
  return 0;
}
