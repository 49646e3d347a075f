#include "daemon/daemon_options.h"

#include <sys/statvfs.h>

#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/byte_size.h"
#include "common/command_line.h"
#include "common/socket_path.h"
#include "daemon/option_keys.h"

namespace tensorbroker::daemon {

std::string DaemonUsage() {
  return absl::StrCat(
      "Usage: tensorbrokerd [--socket PATH] [--capacity SIZE] [--cuda-capacity SIZE]\n"
      "                    [--log-level LEVEL] [--metrics-listen ADDR] [--admin-group GROUP]\n"
      "                    [--default-readers LIST] [--quota-bytes SIZE] [--quota-tensors N]\n"
      "                    [--pending-timeout DURATION] [--handshake-timeout DURATION]\n"
      "                    [--max-connections N] [--watch-log N] [--config PATH]\n"
      "                    [--print-config] [--takeover]\n"
      "\n"
      "tensorbrokerd owns shared memory and publishes tensors by name over a gRPC API\n"
      "(tensorbroker.v1.Broker) on a Unix socket. Clients get DLPack tensors that point at\n"
      "the very same pages; memory is freed when no name and no lease refers to it.\n"
      "\n"
      "  --socket PATH      Unix socket to serve on. Default: $TENSORBROKER_SOCKET, else\n"
      "                     /run/tensorbroker/broker.sock for root, else\n"
      "                     $XDG_RUNTIME_DIR/tensorbroker/broker.sock, else\n"
      "                     /tmp/tensorbroker-$UID/broker.sock (now: ",
      ResolveDefaultSocketPath(),
      ").\n"
      "                     One daemon per socket (PATH.lock is held); a stale socket left\n"
      "                     by a dead daemon is replaced.\n"
      "  --capacity SIZE    Most shared memory to reserve, e.g. 512M, 4G, 1.5GiB or plain\n"
      "                     bytes. Default: half of /dev/shm (now: ",
      FormatByteSize(DefaultCapacityBytes()),
      ").\n"
      "  --cuda-capacity SIZE\n"
      "                     Most device memory to hold on each GPU, in slabs allocated as\n"
      "                     needed. Default: half of each GPU's memory. 0: serve no CUDA\n"
      "                     tensors. Without a usable GPU only CPU tensors are served.\n"
      "  --log-level LEVEL  error, warning, notice, info (default) or debug. Logs go to\n"
      "                     stderr with syslog priority prefixes (<3>..<7>).\n"
      "  --metrics-listen ADDR\n"
      "                     Also serve the Prometheus metrics over HTTP at\n"
      "                     http://ADDR/metrics; ADDR is HOST:PORT, [IPV6]:PORT or :PORT\n"
      "                     (every interface), e.g. 127.0.0.1:9464. Default: off.\n"
      "  --admin-group GROUP\n"
      "                     Members of GROUP (and root) may replace, delete and read every\n"
      "                     tensor and see every user's usage. Default: none (root only).\n"
      "  --default-readers LIST\n"
      "                     Who may read a tensor whose Put or Create names no readers (its\n"
      "                     owner and administrators always may): comma-separated uid:N,\n"
      "                     gid:N, user:NAME, group:NAME, or * for anyone who may connect.\n"
      "                     Default: *. The config file may set readers[PREFIX] and\n"
      "                     publishers[PREFIX] for the names under PREFIX.\n"
      "  --quota-bytes SIZE Most bytes each user may hold (every version in memory that\n"
      "                     they created). 0 (default): unlimited. The config file may set\n"
      "                     quota-bytes[USER] for one user (a name or uid:N).\n"
      "  --quota-tensors N  Most tensors each user may hold; 0 (default): unlimited.\n"
      "                     quota-tensors[USER] in the config file, for one user.\n"
      "  --pending-timeout DURATION\n"
      "                     Abort a Create not sealed, or a Put not finished, this long\n"
      "                     after it began, freeing its name: 60s (default), 5m, 500ms...\n"
      "  --handshake-timeout DURATION\n"
      "                     Close a connection that has made no call (gRPC socket) or\n"
      "                     opened no session (local channel) this long after it\n"
      "                     connected. Default: 10s.\n"
      "  --max-connections N\n"
      "                     Most client connections at once on each socket (the gRPC\n"
      "                     socket and the local channel, SOCKET.fd): up to twice N in\n"
      "                     all; more are closed at once. Default: 4096. Connections of\n"
      "                     the daemon's own uid (its health check) have 16 more in\n"
      "                     reserve on each.\n"
      "  --watch-log N      Events the daemon remembers for Watch streams (the newest N):\n"
      "                     a watcher further behind, or resuming from before them, gets\n"
      "                     one LOST event for what it missed. Default: 16384 (about 5 MB).\n"
      "  --config PATH      Read settings from PATH first (default: ",
      kDefaultConfigPath,
      "\n"
      "                     when it exists): `key = value` lines with the flags' names as\n"
      "                     keys, plus readers[PREFIX], publishers[PREFIX],\n"
      "                     quota-bytes[USER] and quota-tensors[USER]; `#` comments.\n"
      "                     Flags override the file. SIGHUP re-reads it:\n"
      "                     log-level changes at once, the others at the next start.\n"
      "  --print-config     Print the effective settings in the file's format and exit.\n"
      "  --takeover         Take over from the daemon running on --socket, without\n"
      "                     systemd: it hands this one its tensors (CPU), its sockets and\n"
      "                     its lock over the local channel and exits; clients reconnect\n"
      "                     on their own and new ones wait in the socket's backlog meanwhile.\n"
      "                     Same user as the running daemon, or root.\n"
      "  --help             Show this text.\n"
      "\n"
      "SIGTERM or SIGINT: stop accepting, finish in-flight calls, remove every segment and\n"
      "the socket, exit 0.\n");
}

uint64_t DefaultCapacityBytes() {
  struct statvfs fs;
  if (::statvfs("/dev/shm", &fs) != 0) return 1ull << 30;
  return static_cast<uint64_t>(fs.f_blocks) * fs.f_frsize / 2;
}

namespace {

// How errors name a setting: the flag itself, or "file:line: key".
std::string FieldOf(const Setting& setting) {
  if (absl::StartsWith(setting.origin, "--")) return setting.origin;
  return absl::StrCat(setting.origin, ": ", setting.key);
}

// One setting, through the key table (option_keys.h).
absl::Status Apply(const Setting& setting, DaemonOptions* options) {
  const std::string field = FieldOf(setting);
  if (size_t open = setting.key.find('[');
      open != std::string::npos && absl::EndsWith(setting.key, "]")) {
    if (const KeyedOptionKey* keyed =
            FindKeyedOptionKey(absl::string_view(setting.key).substr(0, open))) {
      return keyed->apply(setting.key.substr(open + 1, setting.key.size() - open - 2),
                          setting.value, field, options);
    }
  } else if (const OptionKey* key = FindOptionKey(setting.key)) {
    return key->apply(setting.value, field, options);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      setting.origin, ": unknown key '", setting.key.substr(0, 64), "' (keys: ", KeyList(), ")"));
}

// The flags of the table's keys, each occurrence in argv order, as settings.
std::vector<Setting> FlagSettings(const CLI::App& app) {
  std::vector<Setting> settings;
  std::map<const CLI::Option*, size_t> taken;  // occurrences of each option so far
  for (const CLI::Option* option : app.parse_order()) {
    const std::string flag = option->get_name();
    const std::vector<std::string>& values = option->results();
    const size_t index = taken[option]++;
    if (FindOptionKey(absl::string_view(flag).substr(2)) == nullptr) continue;  // --config, modes
    if (index >= values.size()) continue;
    settings.push_back({flag.substr(2), values[index], flag});
  }
  return settings;
}

}  // namespace

absl::StatusOr<CommandLine> ParseCommandLine(int argc, const char* const* argv) {
  CommandLine command_line;
  CLI::App app;
  app.set_help_flag();  // DaemonUsage() is the help
  app.allow_extras();   // the daemon's own message for an unknown argument
  app.add_flag("-h,--help", command_line.help);
  app.add_flag("--print-config", command_line.print_config);
  app.add_flag("--takeover", command_line.takeover);
  std::string config;
  app.add_option("--config", config)
      ->type_name("a value")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  std::vector<std::string> unused;
  for (const OptionKey& key : OptionKeys()) {
    app.add_option(absl::StrCat("--", key.key), unused)
        ->type_name("a value")
        ->expected(1)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  }
  if (absl::Status s = ParseWithCli11(app, std::vector<std::string>(argv, argv + argc)); !s.ok()) {
    return s;
  }
  if (const std::vector<std::string> extra = Leftovers(app); !extra.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown argument '", extra.front().substr(0, 64), "' (see --help)"));
  }
  if (app.count("--config") > 0) {
    if (config.empty()) return absl::InvalidArgumentError("--config is empty");
    command_line.config_path = config;
    command_line.config_given = true;
  }
  command_line.flags = FlagSettings(app);
  return command_line;
}

absl::StatusOr<DaemonOptions> ResolveSettings(const std::vector<Setting>& settings,
                                              uint64_t default_capacity) {
  DaemonOptions options;
  options.capacity_bytes = default_capacity;
  for (const Setting& setting : settings) {
    if (absl::Status s = Apply(setting, &options); !s.ok()) return s;
  }
  if (options.socket_path.empty()) options.socket_path = ResolveDefaultSocketPath();
  return options;
}

absl::StatusOr<DaemonOptions> LoadDaemonOptions(const CommandLine& command_line,
                                                uint64_t default_capacity) {
  std::vector<Setting> settings;
  std::string config_used;
  auto from_file = ReadConfigFile(command_line.config_path);
  if (from_file.ok()) {
    settings = *std::move(from_file);
    config_used = command_line.config_path;
  } else if (command_line.config_given || !absl::IsNotFound(from_file.status())) {
    return from_file.status();  // an explicit --config must exist; any file must be readable
  }
  // Flags override the file.
  settings.insert(settings.end(), command_line.flags.begin(), command_line.flags.end());
  auto options = ResolveSettings(settings, default_capacity);
  if (options.ok()) {
    options->config_path = config_used;
    options->takeover = command_line.takeover;
  }
  return options;
}

std::string FormatConfig(const DaemonOptions& options) {
  const AccessConfig& access = options.access;
  std::string text = absl::StrCat(
      "# tensorbrokerd's effective configuration (config file: ",
      options.config_path.empty() ? "none" : options.config_path, ")\n",
      "socket = ", options.socket_path, "\n", "capacity = ", options.capacity_bytes, "  # ",
      FormatByteSize(options.capacity_bytes), "\n",
      options.cuda_capacity_bytes.has_value()
          ? absl::StrCat("cuda-capacity = ", *options.cuda_capacity_bytes, "  # ",
                         FormatByteSize(*options.cuda_capacity_bytes), " per GPU\n")
          : "# cuda-capacity: not set: half of each GPU's memory\n",
      "log-level = ", LogLevelName(options.log_level), "\n",
      options.metrics_listen.empty()
          ? "# metrics-listen: not set: no HTTP /metrics\n"
          : absl::StrCat("metrics-listen = ", options.metrics_listen, "\n"),
      options.admin_group.empty() ? "# admin-group: not set: root only\n"
                                  : absl::StrCat("admin-group = ", options.admin_group, "\n"),
      "default-readers = ", absl::StrJoin(access.default_readers.Entries(), ","), "\n",
      "quota-bytes = ", access.default_quota.bytes, "  # ",
      access.default_quota.bytes == 0 ? std::string("unlimited")
                                      : FormatByteSize(access.default_quota.bytes),
      "\n", "quota-tensors = ", access.default_quota.tensors,
      access.default_quota.tensors == 0 ? "  # unlimited" : "", "\n",
      "pending-timeout = ", absl::FormatDuration(options.pending_timeout), "\n",
      "handshake-timeout = ", absl::FormatDuration(options.handshake_timeout), "\n",
      "max-connections = ", options.max_connections, "\n", "watch-log = ", options.watch_log, "\n");
  for (const auto& [prefix, rule] : access.prefix_rules) {
    if (rule.readers.has_value()) {
      absl::StrAppend(&text, "readers[", prefix,
                      "] = ", absl::StrJoin(rule.readers->Entries(), ","), "\n");
    }
    if (rule.publishers.has_value()) {
      absl::StrAppend(&text, "publishers[", prefix,
                      "] = ", absl::StrJoin(rule.publishers->Entries(), ","), "\n");
    }
  }
  for (const auto& [uid, bytes] : access.quota_bytes_by_uid) {
    absl::StrAppend(&text, "quota-bytes[uid:", uid, "] = ", bytes, "\n");
  }
  for (const auto& [uid, tensors] : access.quota_tensors_by_uid) {
    absl::StrAppend(&text, "quota-tensors[uid:", uid, "] = ", tensors, "\n");
  }
  return text;
}

}  // namespace tensorbroker::daemon
