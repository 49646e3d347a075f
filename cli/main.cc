// tensorbroker: the command-line tool of tensorbrokerd (see `tensorbroker --help`).
#include <iostream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"

int main(int argc, char** argv) {
  using namespace tensorbroker::cli;
  const std::vector<std::string> args(argv, argv + argc);
  absl::StatusOr<Invocation> inv = ParseArgs(args);
  if (!inv.ok()) {
    std::cerr << "tensorbroker: " << inv.status().message() << "\n"
              << "Try 'tensorbroker --help' for more information.\n";
    return kExitUsage;
  }
  if (inv->version) {
    std::cout << "tensorbroker " << TENSORBROKER_VERSION << "\n";
    return kExitOk;
  }
  if (inv->help) {
    std::cout << HelpText(inv->command);
    return kExitOk;
  }
  const int status = Run(*inv, std::cout, std::cerr);
  std::cout.flush();
  if (!std::cout) {
    std::cerr << "tensorbroker: cannot write to standard output\n";
    return kExitFailure;
  }
  return status;
}
