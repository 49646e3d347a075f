// tensorbrokerd: see DaemonUsage() (daemon_options.cc) or run with --help.
#include <cstdio>
#include <string>

#include "daemon/daemon_options.h"
#include "daemon/daemon_runner.h"
#include "daemon/log.h"

int main(int argc, char** argv) {
  using namespace tensorbroker::daemon;
  auto options = ParseDaemonOptions(argc, argv, DefaultCapacityBytes());
  if (!options.ok()) {
    std::fprintf(stderr, "tensorbrokerd: %s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  if (options->help) {
    std::fputs(DaemonUsage().c_str(), stdout);
    return 0;
  }
  absl::Status status = RunDaemon(*options);
  if (!status.ok()) {
    LogLine(LogLevel::kError, "tensorbrokerd: " + std::string(status.message()));
    return 1;
  }
  return 0;
}
