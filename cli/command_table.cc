#include "cli/command_table.h"

#include "cli/help_texts.h"

namespace tensorbroker::cli {
namespace {

constexpr uint32_t kWatchOptions = kJsonOption | kAfterOption | kCountOption;

const CommandSpec kCommands[] = {
    {Command::kLs, "ls", 0, 1, "ls [PREFIX] [--json]", kJsonOption, help::kLsHelp},
    {Command::kStat, "stat", 1, 1, "stat NAME [--json]", kJsonOption, help::kStatHelp},
    {Command::kPut, "put", 2, 2,
     "put NAME FILE.npy [--replace] [--mutable] [--device DEV] [--readers LIST]", kPutOptions,
     help::kPutHelp},
    {Command::kGet, "get", 2, 2, "get NAME FILE.npy", 0, help::kGetHelp},
    {Command::kRm, "rm", 1, 1, "rm NAME", 0, help::kRmHelp},
    {Command::kStats, "stats", 0, 0, "stats [--json|--prometheus]", kJsonOption | kPrometheusOption,
     help::kStatsHelp},
    {Command::kHealth, "health", 0, 0, "health [--timeout SECONDS]", kTimeoutOption,
     help::kHealthHelp},
    {Command::kWatch, "watch", 1, 1, "watch PREFIX [--json] [--after SEQUENCE] [--count N]",
     kWatchOptions, help::kWatchHelp},
    {Command::kHelp, "help", 0, 1, "help [COMMAND]", 0, help::kHelpHelp},
};

}  // namespace

absl::Span<const CommandSpec> Commands() { return kCommands; }

const CommandSpec* SpecOf(Command command) {
  for (const CommandSpec& spec : kCommands) {
    if (spec.command == command) return &spec;
  }
  return nullptr;
}

Command CommandFromName(absl::string_view name) {
  for (const CommandSpec& spec : kCommands) {
    if (spec.name == name) return spec.command;
  }
  return Command::kNone;
}

absl::string_view CommandName(Command command) {
  const CommandSpec* spec = SpecOf(command);
  return spec == nullptr ? "" : spec->name;
}

std::string HelpText(Command command) {
  const CommandSpec* spec = SpecOf(command);
  return std::string(spec == nullptr ? help::kOverview : spec->help);
}

}  // namespace tensorbroker::cli
