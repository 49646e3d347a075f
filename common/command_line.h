// The one argument parser of the project's programs (tensorbroker, tensorbrokerd, the benches):
// CLI11 apps, run through ParseWithCli11 so that every program reports its usage errors the same
// way, as INVALID_ARGUMENT naming the flag. Each program keeps its own help text (CLI11's help
// flag is off) and its own value checks. Pure functions; thread-safe over distinct apps.
#ifndef TENSORBROKER_COMMON_COMMAND_LINE_H_
#define TENSORBROKER_COMMON_COMMAND_LINE_H_

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "absl/status/statusor.h"

namespace tensorbroker {

// Parses argv (argv[0] included) into `app` and returns what no option or positional took, in
// order: unknown options and words (use allow_extras()), then "--" and everything after it, as
// given (CLI11 never sees them). Before CLI11 sees them, "--flag=" (an empty value) becomes
// "--flag" "" so that it is an empty value rather than taking the next argument.
// Errors, INVALID_ARGUMENT:
//   "--flag needs NOUN"           a value is missing; NOUN is the option's type_name()
//   "--flag given more than once" an option that takes one value appeared twice
//   "--flag takes no value, got '--flag=x'"  a flag (no value) written with one
//   CLI11's own text              anything else
absl::StatusOr<std::vector<std::string>> ParseWithCli11(CLI::App& app,
                                                        const std::vector<std::string>& argv);

}  // namespace tensorbroker

#endif  // TENSORBROKER_COMMON_COMMAND_LINE_H_
