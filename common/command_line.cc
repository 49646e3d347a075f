#include "common/command_line.h"

#include <algorithm>

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

}  // namespace

absl::Status ParseWithCli11(CLI::App& app, const std::vector<std::string>& argv) {
  std::vector<std::string> args;  // reversed, as CLI11 consumes them
  for (size_t i = 1; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (absl::StartsWith(arg, "--") && arg.size() > 3 && arg.back() == '=' &&
        arg.find('=') == arg.size() - 1) {
      args.push_back(arg.substr(0, arg.size() - 1));
      args.emplace_back();
    } else {
      args.push_back(arg);
    }
  }
  std::reverse(args.begin(), args.end());
  try {
    app.parse(args);
  } catch (const CLI::ArgumentMismatch& e) {
    return absl::InvalidArgumentError(MismatchMessage(app, e.what()));
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(e.what());
  }
  return absl::OkStatus();
}

std::vector<std::string> Leftovers(const CLI::App& app) { return app.remaining(true); }

}  // namespace tensorbroker
