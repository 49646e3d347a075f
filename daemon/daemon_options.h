// tensorbrokerd's command line. Pure parsing; no side effects.
#ifndef TENSORBROKER_DAEMON_DAEMON_OPTIONS_H_
#define TENSORBROKER_DAEMON_DAEMON_OPTIONS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/log.h"

namespace tensorbroker::daemon {

struct DaemonOptions {
  std::string socket_path;      // resolved: never empty after parsing
  uint64_t capacity_bytes = 0;  // resolved: never 0 after parsing
  // Device memory per GPU; unset: half of each GPU's memory. 0 turns CUDA serving off.
  std::optional<uint64_t> cuda_capacity_bytes;
  LogLevel log_level = LogLevel::kInfo;
  bool help = false;
};

// The --help text.
std::string DaemonUsage();
// Parses argv. INVALID_ARGUMENT naming the flag for unknown flags and bad values.
// `default_capacity` is used when --capacity is absent.
absl::StatusOr<DaemonOptions> ParseDaemonOptions(int argc, const char* const* argv,
                                                 uint64_t default_capacity);
// Half of the tmpfs behind /dev/shm: a default that leaves room for everyone else.
uint64_t DefaultCapacityBytes();

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_DAEMON_OPTIONS_H_
