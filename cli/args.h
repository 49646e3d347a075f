// Command-line parsing of the `tensorbroker` tool, with CLI11 over the command table
// (command_table.h). ParseArgs turns argv into an Invocation or a usage error (INVALID_ARGUMENT
// whose message is meant for the user, naming the flag or command and the value; the tool exits
// with status 2 on it). Options may appear before or after the subcommand's arguments; "--" ends
// options. Pure functions, thread-safe.
#ifndef TENSORBROKER_CLI_ARGS_H_
#define TENSORBROKER_CLI_ARGS_H_

#include <string>
#include <vector>

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "cli/command_table.h"

namespace tensorbroker::cli {

struct Invocation {
  Command command = Command::kNone;
  std::string socket_path;             // empty: the client library's default
  std::vector<std::string> arguments;  // positional arguments after the subcommand
  bool help = false;                   // --help: print the help of `command` and exit 0
  bool version = false;                // --version
  bool json = false;                   // ls, stat, stats
  bool prometheus = false;             // stats
  bool replace = false;                // put
  bool is_mutable = false;             // put
  std::string device;                  // put --device: "cpu", "cuda:N"; empty: cpu
  std::vector<std::string> readers;    // put --readers, split at commas; empty: the default
  double timeout_seconds = 1.0;        // health --timeout
  std::optional<uint64_t> after;       // watch --after
  uint64_t count = 0;                  // watch --count (0: until interrupted)
};

absl::StatusOr<Invocation> ParseArgs(const std::vector<std::string>& argv);

}  // namespace tensorbroker::cli

#endif  // TENSORBROKER_CLI_ARGS_H_
