#include "cli/args.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/command_line.h"
#include "tensorbroker/dtype_names.h"

namespace tensorbroker::cli {
namespace {

// Option values as given, every occurrence in order; checked after the parse (ConvertValues).
struct RawValues {
  std::vector<std::string> timeout, after, count, device, readers;
};

// The options that take a value: the flag, what its missing value is called in "FLAG needs
// NOUN", the commands that take it (CommandOption bits) and where its text goes.
struct ValueOption {
  const char* flag;
  const char* noun;
  uint32_t option;
  std::vector<std::string> RawValues::*values;
};
const ValueOption kValueOptions[] = {
    {"--timeout", "SECONDS", kTimeoutOption, &RawValues::timeout},
    {"--after", "a number", kAfterOption, &RawValues::after},
    {"--count", "a number", kCountOption, &RawValues::count},
    {"--device", "a value (cpu, cuda:N)", kPutOptions, &RawValues::device},
    {"--readers", "a list (uid:N, gid:N, user:NAME, group:NAME, peer:NAME, *)", kPutOptions,
     &RawValues::readers},
};

// The options without a value.
struct FlagOption {
  const char* flag;
  uint32_t option;
  bool Invocation::*field;
};
const FlagOption kFlagOptions[] = {
    {"--json", kJsonOption, &Invocation::json},
    {"--prometheus", kPrometheusOption, &Invocation::prometheus},
    {"--replace", kPutOptions, &Invocation::replace},
    {"--mutable", kPutOptions, &Invocation::is_mutable},
};

absl::Status UsageError(absl::string_view message) { return absl::InvalidArgumentError(message); }

absl::Status WholeNumber(absl::string_view flag, const std::string& value, uint64_t* number) {
  if (absl::SimpleAtoi(value, number)) return absl::OkStatus();
  return UsageError(absl::StrCat(flag, " '", value, "' is not a whole number >= 0"));
}

std::string CommandList() {
  std::vector<absl::string_view> names;
  for (const CommandSpec& spec : Commands()) names.push_back(spec.name);
  return absl::StrJoin(names, ", ");
}

absl::Status UnknownCommand(absl::string_view name) {
  return UsageError(absl::StrCat("unknown command '", name, "' (commands: ", CommandList(), ")"));
}

// One parse: the CLI11 app built from the command table, and what it fills in.
class ArgParser {
 public:
  ArgParser() {
    app_.set_help_flag();  // the tool's own help texts
    app_.allow_extras();   // unknown options and commands: the tool's own messages
    app_.require_subcommand(0, 1);
    app_.add_option("--socket", socket_)->type_name("a PATH");
    app_.add_flag("-h,--help", inv_.help);
    app_.add_flag("--version", inv_.version);
    for (const CommandSpec& spec : Commands()) AddCommand(spec);
  }

  absl::StatusOr<Invocation> Parse(const std::vector<std::string>& argv) {
    absl::StatusOr<std::vector<std::string>> leftovers = ParseWithCli11(app_, argv);
    if (!leftovers.ok()) return leftovers.status();
    for (const auto& [command, sub] : subcommands_) {
      if (sub->parsed()) inv_.command = command;
    }
    if (absl::Status s = CheckLeftovers(*leftovers); !s.ok()) return s;
    if (absl::Status s = ConvertValues(); !s.ok()) return s;
    if (inv_.help || inv_.version) return std::move(inv_);
    if (absl::Status s = CheckArguments(); !s.ok()) return s;
    return std::move(inv_);
  }

 private:
  void AddCommand(const CommandSpec& spec) {
    CLI::App* sub = app_.add_subcommand(std::string(spec.name));
    sub->set_help_flag();
    sub->allow_extras();
    sub->fallthrough();  // --socket and --help after the command
    sub->add_option("arguments", inv_.arguments);
    sub->add_flag("--version", version_after_command_);  // refused, as before the command only
    for (const FlagOption& flag : kFlagOptions) {
      if (spec.options & flag.option) sub->add_flag(flag.flag, inv_.*flag.field);
    }
    for (const ValueOption& value : kValueOptions) {
      if (!(spec.options & value.option)) continue;
      sub->add_option(value.flag, raw_.*value.values)
          ->type_name(value.noun)
          ->expected(1)
          ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    }
    subcommands_.emplace_back(spec.command, sub);
  }

  std::string Context() const {
    if (inv_.command == Command::kNone) return "";
    return absl::StrCat(" for '", CommandName(inv_.command), "'");
  }

  // What no option took: unknown options and commands; then "--" and the arguments after it.
  absl::Status CheckLeftovers(const std::vector<std::string>& leftovers) {
    if (version_after_command_) {
      return UsageError(absl::StrCat("unknown option '--version'", Context()));
    }
    auto dashes = std::find(leftovers.begin(), leftovers.end(), "--");
    for (auto it = leftovers.begin(); it != dashes; ++it) {
      const std::string& arg = *it;
      if (arg.size() > 1 && arg[0] == '-') {
        return UsageError(absl::StrCat("unknown option '", arg, "'", Context()));
      }
      if (inv_.command == Command::kNone) return UnknownCommand(arg);
      inv_.arguments.push_back(arg);
    }
    if (dashes == leftovers.end()) return absl::OkStatus();
    for (const std::string& arg : std::vector<std::string>(dashes + 1, leftovers.end())) {
      if (inv_.command == Command::kNone) {
        inv_.command = CommandFromName(arg);
        if (inv_.command == Command::kNone) return UnknownCommand(arg);
      } else {
        inv_.arguments.push_back(arg);
      }
    }
    return absl::OkStatus();
  }

  absl::Status ConvertValues() {
    if (app_.count("--socket") > 0 && socket_.empty()) {
      return UsageError("--socket PATH must not be empty");
    }
    inv_.socket_path = socket_;
    for (const std::string& value : raw_.timeout) {
      double seconds = 0;
      if (!absl::SimpleAtod(value, &seconds) || !(seconds > 0) || seconds > 3600) {
        return UsageError(
            absl::StrCat("--timeout '", value, "' is not a number of seconds in (0, 3600]"));
      }
      inv_.timeout_seconds = seconds;
    }
    for (const std::string& value : raw_.after) {
      if (absl::Status s = WholeNumber("--after", value, &inv_.after.emplace()); !s.ok()) return s;
    }
    for (const std::string& value : raw_.count) {
      if (absl::Status s = WholeNumber("--count", value, &inv_.count); !s.ok()) return s;
    }
    return ConvertPutValues();
  }

  absl::Status ConvertPutValues() {
    for (const std::string& value : raw_.readers) {
      const size_t before = inv_.readers.size();
      for (absl::string_view entry : absl::StrSplit(value, ',', absl::SkipWhitespace())) {
        inv_.readers.emplace_back(absl::StripAsciiWhitespace(entry));
      }
      if (inv_.readers.size() == before) return UsageError("--readers is empty");
    }
    for (const std::string& value : raw_.device) {
      if (absl::Status s = ParseDeviceName(value, "--device").status(); !s.ok()) {
        return UsageError(std::string(s.message()));
      }
      inv_.device = value;
    }
    return absl::OkStatus();
  }

  absl::Status CheckArguments() {
    if (inv_.json && inv_.prometheus) {
      return UsageError("--json and --prometheus exclude each other");
    }
    const CommandSpec* spec = SpecOf(inv_.command);
    if (spec == nullptr) return UsageError("no command given");
    if (inv_.arguments.size() < spec->min_args || inv_.arguments.size() > spec->max_args) {
      return UsageError(absl::StrCat(
          inv_.arguments.size() < spec->min_args ? "missing argument" : "too many arguments",
          " for '", spec->name, "'; usage: tensorbroker ", spec->usage));
    }
    if (inv_.command == Command::kHelp && !inv_.arguments.empty() &&
        CommandFromName(inv_.arguments[0]) == Command::kNone) {
      return UsageError(absl::StrCat("unknown command '", inv_.arguments[0], "'"));
    }
    return absl::OkStatus();
  }

  CLI::App app_;
  Invocation inv_;
  std::string socket_;
  RawValues raw_;
  bool version_after_command_ = false;
  std::vector<std::pair<Command, CLI::App*>> subcommands_;
};

}  // namespace

absl::StatusOr<Invocation> ParseArgs(const std::vector<std::string>& argv) {
  return ArgParser().Parse(argv);
}

}  // namespace tensorbroker::cli
