// The subcommands of the `tensorbroker` tool, run against a daemon through the client
// library. Run() connects, performs one invocation, prints results on `out` and errors on
// `err` (one line, "tensorbroker: " + what failed + the status code and message), and returns
// the process exit status: 0 on success, 1 when the operation failed. Usage errors (status 2)
// are caught earlier, by ParseArgs.
#ifndef TENSORBROKER_CLI_COMMANDS_H_
#define TENSORBROKER_CLI_COMMANDS_H_

#include <ostream>

#include "cli/args.h"

namespace tensorbroker::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

int Run(const Invocation& invocation, std::ostream& out, std::ostream& err);

}  // namespace tensorbroker::cli

#endif  // TENSORBROKER_CLI_COMMANDS_H_
