#include "common/command_line.h"

#include <algorithm>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace tensorbroker {
namespace {

// The option of `app` or one of its subcommands named `flag` ("--socket"), or nullptr.
const CLI::Option* FindOption(const CLI::App& app, const std::string& flag) {
  if (const CLI::Option* option = app.get_option_no_throw(flag)) return option;
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (const CLI::Option* option = FindOption(*sub, flag)) return option;
  }
  return nullptr;
}

// CLI11's ArgumentMismatch texts start with the option's name: "--socket: 1 required PATH
// missing", "--socket: At Most 1 required but received 2".
std::string MismatchMessage(const CLI::App& app, absl::string_view text) {
  const size_t colon = text.find(':');
  if (colon == absl::string_view::npos) return std::string(text);
  const std::string flag(text.substr(0, colon));
  const CLI::Option* option = FindOption(app, flag);
  if (option == nullptr) return std::string(text);
  if (absl::EndsWith(text, " missing")) {
    return absl::StrCat(flag, " needs ", option->get_type_name());
  }
  if (absl::StrContains(text, "At Most")) return absl::StrCat(flag, " given more than once");
  return std::string(text);
}

// argv from argv[1] up to "--", reversed as CLI11 consumes it, with "--flag=" split in two;
// refuses a flag given a value.
absl::StatusOr<std::vector<std::string>> ArgsForCli11(const CLI::App& app,
                                                      const std::vector<std::string>& argv) {
  std::vector<std::string> args;
  for (size_t i = 1; i < argv.size() && argv[i] != "--"; ++i) {
    const std::string& arg = argv[i];
    const size_t eq = arg.find('=');
    if (!absl::StartsWith(arg, "--") || eq == std::string::npos) {
      args.push_back(arg);
      continue;
    }
    // CLI11 would read "--json=false" as the flag's value; a flag takes none.
    const CLI::Option* option = FindOption(app, arg.substr(0, eq));
    if (option != nullptr && option->get_expected_max() == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(arg.substr(0, eq), " takes no value, got '", arg, "'"));
    }
    if (eq + 1 == arg.size()) {  // an empty value, not the next argument
      args.push_back(arg.substr(0, eq));
      args.emplace_back();
    } else {
      args.push_back(arg);
    }
  }
  std::reverse(args.begin(), args.end());
  return args;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseWithCli11(CLI::App& app,
                                                        const std::vector<std::string>& argv) {
  absl::StatusOr<std::vector<std::string>> args = ArgsForCli11(app, argv);
  if (!args.ok()) return args.status();
  try {
    app.parse(*args);
  } catch (const CLI::ArgumentMismatch& e) {
    return absl::InvalidArgumentError(MismatchMessage(app, e.what()));
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(e.what());
  }
  std::vector<std::string> leftovers = app.remaining(true);
  const auto dashes = std::find(argv.begin() + std::min<size_t>(argv.size(), 1), argv.end(), "--");
  leftovers.insert(leftovers.end(), dashes, argv.end());
  return leftovers;
}

}  // namespace tensorbroker
