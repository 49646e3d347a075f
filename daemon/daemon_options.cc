#include "daemon/daemon_options.h"

#include <sys/statvfs.h>

#include "absl/strings/string_view.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "common/socket_path.h"
#include "daemon/listen_address.h"

namespace tensorbroker::daemon {

std::string DaemonUsage() {
  return absl::StrCat(
      "Usage: tensorbrokerd [--socket PATH] [--capacity SIZE] [--cuda-capacity SIZE]\n"
      "                    [--log-level LEVEL] [--metrics-listen ADDR] [--config PATH]\n"
      "                    [--print-config]\n"
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
      "  --config PATH      Read settings from PATH first (default: ", kDefaultConfigPath, "\n"
      "                     when it exists): `key = value` lines with the keys socket,\n"
      "                     capacity, cuda-capacity, log-level and metrics-listen; `#`\n"
      "                     comments. Flags override the file. SIGHUP re-reads it:\n"
      "                     log-level changes at once, the others at the next start.\n"
      "  --print-config     Print the effective settings in the file's format and exit.\n"
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
constexpr absl::string_view kKeys[] = {"socket", "capacity", "cuda-capacity", "log-level",
                                        "metrics-listen"};

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

absl::Status Apply(const Setting& setting, DaemonOptions* options) {
  const std::string field = FieldOf(setting);
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
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        setting.origin, ": unknown key '", setting.key.substr(0, 64),
        "' (keys: socket, capacity, cuda-capacity, log-level, metrics-listen)"));
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
  if (options.ok()) options->config_path = config_used;
  return options;
}

std::string FormatConfig(const DaemonOptions& options) {
  return absl::StrCat(
      "# tensorbrokerd's effective configuration (config file: ",
      options.config_path.empty() ? "none" : options.config_path, ")\n",
      "socket = ", options.socket_path, "\n",
      "capacity = ", options.capacity_bytes, "  # ", FormatByteSize(options.capacity_bytes), "\n",
      options.cuda_capacity_bytes.has_value()
          ? absl::StrCat("cuda-capacity = ", *options.cuda_capacity_bytes, "  # ",
                         FormatByteSize(*options.cuda_capacity_bytes), " per GPU\n")
          : "# cuda-capacity: not set: half of each GPU's memory\n",
      "log-level = ", LogLevelName(options.log_level), "\n",
      options.metrics_listen.empty() ? "# metrics-listen: not set: no HTTP /metrics\n"
                                     : absl::StrCat("metrics-listen = ", options.metrics_listen,
                                                    "\n"));
}

}  // namespace tensorbroker::daemon
