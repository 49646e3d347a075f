// tensorbrokerd's settings as one table of keys: each key is a config file key and, with "--"
// before it, a flag; the table says how its value applies to DaemonOptions and what --help says
// of it. The flags (ParseCommandLine), the config file (ResolveSettings), --help (DaemonUsage)
// and the list of keys in the "unknown key" error all read it. Keys with an argument,
// key[ARGUMENT], are the config file's only. Constants and pure functions; thread-safe.
#ifndef TENSORBROKER_DAEMON_OPTION_KEYS_H_
#define TENSORBROKER_DAEMON_OPTION_KEYS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace tensorbroker::daemon {

struct DaemonOptions;

// `field` names the setting in errors: the flag ("--capacity") or "file:line: key".
struct OptionKey {
  absl::string_view key;
  absl::string_view value_name;  // in --help: "--capacity SIZE"
  absl::Status (*apply)(const std::string& value, const std::string& field, DaemonOptions* options);
  // Its value in DaemonOptions as --print-config writes it after "key = ", e.g. "4294967296  #
  // 4.0 GiB"; empty: not set, and the line says "# key: not set: " and `unset`.
  std::string (*print)(const DaemonOptions& options);
  absl::string_view unset;
  std::string (*now)();  // the default as it is now, for "{now}" in help; or nullptr
  // Its --help text, lines without indentation; "{now}" stands for now().
  absl::string_view help;
};

// key[ARGUMENT] = value, e.g. readers[models/] or quota-bytes[alice].
struct KeyedOptionKey {
  absl::string_view key;
  absl::string_view argument;  // what the argument is, for the key list: PREFIX, USER
  absl::Status (*apply)(const std::string& argument, const std::string& value,
                        const std::string& field, DaemonOptions* options);
};

// The keys that are also flags, in --help order.
absl::Span<const OptionKey> OptionKeys();
// The config file's keys with an argument.
absl::Span<const KeyedOptionKey> KeyedOptionKeys();
// The entry for `key`, or nullptr.
const OptionKey* FindOptionKey(absl::string_view key);
const KeyedOptionKey* FindKeyedOptionKey(absl::string_view key);
// "socket, capacity, ..., readers[PREFIX], ...": every key, for the unknown-key error.
std::string KeyList();

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_OPTION_KEYS_H_
