// tensorbrokerd's settings: the command line, the config file under it, and the effective
// options they resolve to. Parsing only (the file is read, nothing else); thread-safe.
#ifndef TENSORBROKER_DAEMON_DAEMON_OPTIONS_H_
#define TENSORBROKER_DAEMON_DAEMON_OPTIONS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/app/config_file.h"
#include "daemon/base/log.h"
#include "daemon/memory/cuda_handles.h"
#include "daemon/net/peer_tls.h"
#include "daemon/remote/peer_address.h"
#include "daemon/store/access_policy.h"

namespace tensorbroker::daemon {

inline constexpr char kDefaultConfigPath[] = "/etc/tensorbroker/tensorbrokerd.conf";

struct DaemonOptions {
  std::string socket_path;      // resolved: never empty
  uint64_t capacity_bytes = 0;  // resolved: never 0
  // Device memory per GPU; unset: half of each GPU's memory. 0 turns CUDA serving off.
  std::optional<uint64_t> cuda_capacity_bytes;
  // How GPU slabs reach consumers; kVmm falls back to legacy IPC, per device, where the device
  // lacks VMM with POSIX descriptors.
  CudaHandles cuda_handles = CudaHandles::kLegacyIpc;
  LogLevel log_level = LogLevel::kInfo;
  std::string metrics_listen;  // HOST:PORT serving /metrics over HTTP; empty: none
  std::string peer_listen;     // HOST:PORT serving other brokers over mutual TLS; empty: none
  PeerTlsPaths tls;            // --tls-cert, --tls-key, --tls-ca: all three or none
  // remote[PREFIX] = ADDRESS: the names under PREFIX are served by the broker(s) at ADDRESS.
  std::map<std::string, PeerAddress> remote;
  std::string config_path;  // the file the settings came from; empty: none
  // Tenancy: administrators, readers, publishers and quotas.
  AccessConfig access;
  std::string admin_group;  // its name, as given (access.admin_gid is its gid)
  // A Create not sealed, or a Put not finished, this long after it began is aborted.
  absl::Duration pending_timeout = absl::Seconds(60);
  // A connection that has made no call (gRPC) or opened no session (local channel) this long
  // after it connected is closed.
  absl::Duration handshake_timeout = absl::Seconds(10);
  // Most client connections at once, on both sockets together.
  uint32_t max_connections = 4096;
  // Lease tables one user may have at once (StoreOptions::max_lease_tables_per_uid).
  uint32_t max_lease_tables_per_uid = 64;
  // A fetch from a peer that brings less than 1 MiB in this long is cut (TransferPace).
  absl::Duration fetch_stall_timeout = absl::Seconds(10);
  // Events kept for Watch streams (StoreOptions::watch_log).
  uint64_t watch_log = 16384;
  // --takeover (the command line only): take over from the daemon running on the socket.
  bool takeover = false;
};

// What argv says: settings (keys as in the config file), which file to read, and the modes.
struct CommandLine {
  std::vector<Setting> flags;  // in order; origin is the flag ("--capacity")
  std::string config_path = kDefaultConfigPath;
  bool config_given = false;  // --config: then the file must exist
  bool help = false;
  bool print_config = false;
  bool takeover = false;
};

// The --help text.
std::string DaemonUsage();
// INVALID_ARGUMENT naming the flag for unknown flags and missing values.
absl::StatusOr<CommandLine> ParseCommandLine(int argc, const char* const* argv);
// The settings applied in order (later ones win) over the defaults; INVALID_ARGUMENT naming the
// flag or file:line for unknown keys and bad values.
absl::StatusOr<DaemonOptions> ResolveSettings(const std::vector<Setting>& settings,
                                              uint64_t default_capacity);
// The config file's settings (the file may be absent unless --config named it), then the flags.
absl::StatusOr<DaemonOptions> LoadDaemonOptions(const CommandLine& command_line,
                                                uint64_t default_capacity);
// The effective settings in the config file's format (--print-config).
std::string FormatConfig(const DaemonOptions& options);
// Half of the tmpfs behind /dev/shm: a default that leaves room for everyone else.
uint64_t DefaultCapacityBytes();

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_DAEMON_OPTIONS_H_
