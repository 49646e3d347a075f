#include "daemon/app/daemon_options.h"

#include <sys/statvfs.h>

#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/command_line.h"
#include "common/socket_path.h"
#include "daemon/app/option_keys.h"

namespace tensorbroker::daemon {

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

// The TLS files come as three or not at all, and a peer listener or a remote prefix needs them:
// there is no plaintext TCP. The error names the setting that needs the others (the last
// peer-listen or remote[...], else the last TLS file given).
absl::Status CheckPeerSettings(const std::vector<Setting>& settings, const DaemonOptions& options) {
  const PeerTlsPaths& tls = options.tls;
  std::vector<std::string> missing;
  if (tls.cert.empty()) missing.push_back("tls-cert");
  if (tls.key.empty()) missing.push_back("tls-key");
  if (tls.ca.empty()) missing.push_back("tls-ca");
  const bool peers_used = !options.peer_listen.empty() || !options.remote.empty();
  if (missing.empty() || (missing.size() == 3 && !peers_used)) return absl::OkStatus();
  const Setting* needing = nullptr;
  for (const Setting& setting : settings) {
    const bool needs =
        peers_used ? setting.key == "peer-listen" || absl::StartsWith(setting.key, "remote[")
                   : absl::StartsWith(setting.key, "tls-") && !setting.value.empty();
    if (needs) needing = &setting;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(needing == nullptr ? std::string("peer-listen") : FieldOf(*needing),
                   ": needs tls-cert, tls-key and tls-ca (mutual TLS; there is no plaintext TCP): ",
                   absl::StrJoin(missing, ", "), missing.size() == 1 ? " is" : " are", " not set"));
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
  absl::StatusOr<std::vector<std::string>> extra =
      ParseWithCli11(app, std::vector<std::string>(argv, argv + argc));
  if (!extra.ok()) return extra.status();
  if (!extra->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown argument '", extra->front().substr(0, 64), "' (see --help)"));
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
  if (absl::Status s = CheckPeerSettings(settings, options); !s.ok()) return s;
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
  std::string text =
      absl::StrCat("# tensorbrokerd's effective configuration (config file: ",
                   options.config_path.empty() ? "none" : options.config_path, ")\n");
  for (const OptionKey& key : OptionKeys()) {
    const std::string value = key.print(options);
    if (value.empty() && !key.unset.empty()) {
      absl::StrAppend(&text, "# ", key.key, ": not set: ", key.unset, "\n");
    } else {
      absl::StrAppend(&text, key.key, " = ", value, "\n");
    }
  }
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
  for (const auto& [prefix, address] : options.remote) {
    absl::StrAppend(&text, "remote[", prefix, "] = ", address.ToString(), "\n");
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
