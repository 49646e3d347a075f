#include "daemon/daemon_options.h"

#include <sys/statvfs.h>

#include "absl/strings/string_view.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/byte_size.h"
#include "common/socket_path.h"
#include "common/tensor_layout.h"
#include "daemon/listen_address.h"

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

// The flags that take a value, by config key; each is also a config file key.
constexpr absl::string_view kKeys[] = {"socket",          "capacity",          "cuda-capacity",
                                       "log-level",       "metrics-listen",    "admin-group",
                                       "default-readers", "quota-bytes",       "quota-tensors",
                                       "pending-timeout", "handshake-timeout", "max-connections",
                                       "watch-log"};
// Config file keys with an argument: readers[PREFIX], publishers[PREFIX], quota-bytes[USER],
// quota-tensors[USER].
constexpr char kKeyList[] =
    "socket, capacity, cuda-capacity, log-level, metrics-listen, admin-group, default-readers, "
    "quota-bytes, quota-tensors, pending-timeout, handshake-timeout, max-connections, "
    "watch-log, readers[PREFIX], publishers[PREFIX], quota-bytes[USER], quota-tensors[USER]";

bool IsKey(absl::string_view key) {
  for (absl::string_view known : kKeys) {
    if (key == known) return true;
  }
  return false;
}

// How errors name a setting: the flag itself, or "file:line: key".
std::string FieldOf(const Setting& setting) {
  if (absl::StartsWith(setting.origin, "--")) return setting.origin;
  return absl::StrCat(setting.origin, ": ", setting.key);
}

// "60s", "1m30s", "500ms", or plain seconds; more than 0.
absl::StatusOr<absl::Duration> ParsePositiveDuration(const std::string& text,
                                                     const std::string& field) {
  absl::Duration duration;
  int64_t seconds = 0;
  if (absl::SimpleAtoi(text, &seconds)) {
    duration = absl::Seconds(seconds);
  } else if (!absl::ParseDuration(text, &duration)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": '", text.substr(0, 64),
                                                   "' is not a duration (e.g. 60s, 1m30s, 500ms)"));
  }
  if (duration <= absl::ZeroDuration() || duration == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(field, " must be more than 0 and finite"));
  }
  return duration;
}

absl::StatusOr<uint64_t> ParseCount(const std::string& text, const std::string& field,
                                    uint64_t most) {
  uint64_t count = 0;
  if (!absl::SimpleAtoi(text, &count) || count > most) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": '", text.substr(0, 64), "' is not a whole number from 0 to ", most));
  }
  return count;
}

// The uid a quota-bytes[USER] key names: a user name or uid:N.
absl::StatusOr<uint32_t> ParseUserArgument(const std::string& user, const std::string& field) {
  auto set = PrincipalSet::Parse(
      {absl::StartsWith(user, "uid:") ? user : absl::StrCat("user:", user)}, field);
  if (!set.ok()) return set.status();
  const std::vector<std::string> entries = set->Entries();
  uint32_t uid = 0;
  if (entries.size() != 1 || !absl::SimpleAtoi(absl::StripPrefix(entries[0], "uid:"), &uid)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": name one user (a user name or uid:N)"));
  }
  return uid;
}

// Settings of the form key[argument] (config file only).
absl::Status ApplyKeyed(const Setting& setting, absl::string_view key, const std::string& argument,
                        DaemonOptions* options) {
  const std::string field = FieldOf(setting);
  AccessConfig& access = options->access;
  if (key == "readers" || key == "publishers") {
    if (argument.empty()) return absl::InvalidArgumentError(field + ": the prefix is empty");
    if (absl::Status s = ValidatePrefix(argument, field); !s.ok()) return s;
    auto set = PrincipalSet::ParseList(setting.value, field);
    if (!set.ok()) return set.status();
    PrefixRule& rule = access.prefix_rules[argument];
    (key == "readers" ? rule.readers : rule.publishers) = *std::move(set);
  } else if (key == "quota-bytes") {
    auto uid = ParseUserArgument(argument, field);
    if (!uid.ok()) return uid.status();
    auto bytes = ParseByteSize(setting.value, field);
    if (!bytes.ok()) return bytes.status();
    access.quota_bytes_by_uid[*uid] = *bytes;
  } else if (key == "quota-tensors") {
    auto uid = ParseUserArgument(argument, field);
    if (!uid.ok()) return uid.status();
    auto count = ParseCount(setting.value, field, UINT64_MAX);
    if (!count.ok()) return count.status();
    access.quota_tensors_by_uid[*uid] = *count;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        setting.origin, ": unknown key '", setting.key.substr(0, 64), "' (keys: ", kKeyList, ")"));
  }
  return absl::OkStatus();
}

absl::Status Apply(const Setting& setting, DaemonOptions* options) {
  const std::string field = FieldOf(setting);
  if (size_t open = setting.key.find('[');
      open != std::string::npos && absl::EndsWith(setting.key, "]")) {
    return ApplyKeyed(setting, absl::string_view(setting.key).substr(0, open),
                      setting.key.substr(open + 1, setting.key.size() - open - 2), options);
  }
  if (setting.key == "socket") {
    if (setting.value.empty()) return absl::InvalidArgumentError(field + " is empty");
    options->socket_path = setting.value;
  } else if (setting.key == "capacity") {
    auto bytes = ParseByteSize(setting.value, field);
    if (!bytes.ok()) return bytes.status();
    if (*bytes == 0) return absl::InvalidArgumentError(field + " must be more than 0");
    options->capacity_bytes = *bytes;
  } else if (setting.key == "cuda-capacity") {
    auto bytes = ParseByteSize(setting.value, field);
    if (!bytes.ok()) return bytes.status();
    options->cuda_capacity_bytes = *bytes;
  } else if (setting.key == "log-level") {
    auto level = ParseLogLevel(setting.value, field);
    if (!level.ok()) return level.status();
    options->log_level = *level;
  } else if (setting.key == "metrics-listen") {
    if (!setting.value.empty()) {  // empty: off, e.g. to override the file on the command line
      if (absl::Status s = ParseListenAddress(setting.value, field).status(); !s.ok()) return s;
    }
    options->metrics_listen = setting.value;
  } else if (setting.key == "admin-group") {
    options->admin_group = setting.value;
    options->access.admin_gid.reset();
    if (!setting.value.empty()) {  // empty: none, e.g. to override the file
      auto set = PrincipalSet::Parse({absl::StrCat("group:", setting.value)}, field);
      if (!set.ok()) return set.status();
      uint32_t gid = 0;
      (void)absl::SimpleAtoi(absl::StripPrefix(set->Entries()[0], "gid:"), &gid);
      options->access.admin_gid = gid;
    }
  } else if (setting.key == "default-readers") {
    auto set = PrincipalSet::ParseList(setting.value, field);
    if (!set.ok()) return set.status();
    options->access.default_readers = *std::move(set);
  } else if (setting.key == "quota-bytes") {
    auto bytes = ParseByteSize(setting.value, field);
    if (!bytes.ok()) return bytes.status();
    options->access.default_quota.bytes = *bytes;
  } else if (setting.key == "quota-tensors") {
    auto count = ParseCount(setting.value, field, UINT64_MAX);
    if (!count.ok()) return count.status();
    options->access.default_quota.tensors = *count;
  } else if (setting.key == "pending-timeout" || setting.key == "handshake-timeout") {
    auto duration = ParsePositiveDuration(setting.value, field);
    if (!duration.ok()) return duration.status();
    (setting.key == "pending-timeout" ? options->pending_timeout : options->handshake_timeout) =
        *duration;
  } else if (setting.key == "max-connections") {
    auto count = ParseCount(setting.value, field, 1000000);
    if (!count.ok()) return count.status();
    if (*count == 0) return absl::InvalidArgumentError(field + " must be more than 0");
    options->max_connections = static_cast<uint32_t>(*count);
  } else if (setting.key == "watch-log") {
    auto count = ParseCount(setting.value, field, 1u << 24);
    if (!count.ok()) return count.status();
    if (*count == 0) return absl::InvalidArgumentError(field + " must be more than 0");
    options->watch_log = *count;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        setting.origin, ": unknown key '", setting.key.substr(0, 64), "' (keys: ", kKeyList, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CommandLine> ParseCommandLine(int argc, const char* const* argv) {
  CommandLine command_line;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    absl::string_view flag = arg;
    absl::string_view value;
    bool has_value = false;
    if (size_t eq = arg.find('='); absl::StartsWith(arg, "--") && eq != absl::string_view::npos) {
      flag = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    auto take_value = [&]() -> absl::StatusOr<std::string> {
      if (has_value) return std::string(value);
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(flag, " needs a value"));
      return std::string(argv[++i]);
    };
    if (flag == "--help" || flag == "-h") {
      command_line.help = true;
    } else if (flag == "--print-config") {
      command_line.print_config = true;
    } else if (flag == "--takeover") {
      command_line.takeover = true;
    } else if (flag == "--config") {
      auto v = take_value();
      if (!v.ok()) return v.status();
      if (v->empty()) return absl::InvalidArgumentError("--config is empty");
      command_line.config_path = *v;
      command_line.config_given = true;
    } else if (absl::StartsWith(flag, "--") && IsKey(flag.substr(2))) {
      auto v = take_value();
      if (!v.ok()) return v.status();
      command_line.flags.push_back({std::string(flag.substr(2)), *v, std::string(flag)});
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown argument '", arg.substr(0, 64), "' (see --help)"));
    }
  }
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
