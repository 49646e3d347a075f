// The `tensorbroker` tool's one command table: each subcommand's name, its positional arguments,
// the options it takes and its help. The parser (args.cc), the help (HelpText) and the
// dispatcher (commands.cc, by Command) all read it. Constants; thread-safe.
#ifndef TENSORBROKER_CLI_COMMAND_TABLE_H_
#define TENSORBROKER_CLI_COMMAND_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace tensorbroker::cli {

enum class Command { kNone, kHelp, kLs, kStat, kPut, kGet, kRm, kStats, kHealth, kWatch };

// The options a command takes besides the global ones (--socket, --help), as bits.
enum CommandOption : uint32_t {
  kJsonOption = 1u << 0,        // --json
  kPrometheusOption = 1u << 1,  // --prometheus
  kTimeoutOption = 1u << 2,     // --timeout SECONDS
  kAfterOption = 1u << 3,       // --after SEQUENCE
  kCountOption = 1u << 4,       // --count N
  kPutOptions = 1u << 5,        // --replace, --mutable, --device DEV, --readers LIST
};

struct CommandSpec {
  Command command;
  absl::string_view name;
  size_t min_args;
  size_t max_args;
  absl::string_view usage;  // the synopsis after "tensorbroker "
  uint32_t options;         // CommandOption bits
  absl::string_view help;   // the text of 'tensorbroker NAME --help'
};

// Every subcommand, in the order the usage error for an unknown one lists them.
absl::Span<const CommandSpec> Commands();
// The entry of `command`; nullptr for kNone.
const CommandSpec* SpecOf(Command command);

// The help text of `command` (kNone: the overview), ending in '\n'.
std::string HelpText(Command command);
// The subcommand named `name`, or kNone.
Command CommandFromName(absl::string_view name);
absl::string_view CommandName(Command command);

}  // namespace tensorbroker::cli

#endif  // TENSORBROKER_CLI_COMMAND_TABLE_H_
