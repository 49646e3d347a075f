// A second, real process for the integration tests: tensorbroker_test_peer run with
// Subprocess::Spawn (tests/support/subprocess.h; fork+exec, as the test process runs gRPC
// threads), with its stdin and stdout on pipes; it dies with the test process. The peer prints
// one line per step ("held", "map ...", "error NOT_FOUND ..."); the test reads those lines and
// the exit status. The destructor SIGKILLs and reaps a peer that is still running. Not
// thread-safe; one owner.
#ifndef TENSORBROKER_TESTS_INTEGRATION_PEER_PROCESS_H_
#define TENSORBROKER_TESTS_INTEGRATION_PEER_PROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "tests/support/subprocess.h"

namespace tensorbroker::testing {

// Path of the tensorbroker_test_peer binary.
std::string PeerBinaryPath();

class PeerProcess {
 public:
  // Runs `tensorbroker_test_peer <args...> --socket <socket_path>`.
  static absl::StatusOr<PeerProcess> Start(const std::string& socket_path,
                                           std::vector<std::string> args);
  // Runs another peer program the same way: `program <args...> --socket <socket_path>`.
  static absl::StatusOr<PeerProcess> StartProgram(const std::string& program,
                                                  const std::string& socket_path,
                                                  std::vector<std::string> args);

  pid_t pid() const { return process_.pid(); }

  // The next line the peer printed, without the newline. The timeout only guards against a
  // hung peer (an error, never a measurement). FAILED_PRECONDITION at end of output.
  absl::StatusOr<std::string> ReadLine(
      std::chrono::milliseconds timeout = std::chrono::seconds(30));
  // Everything the peer prints until it closes stdout.
  absl::StatusOr<std::string> ReadToEnd(
      std::chrono::milliseconds timeout = std::chrono::seconds(30));
  // Sends one line to the peer's stdin.
  absl::Status WriteLine(const std::string& line);
  // Closes the peer's stdin: peers that wait for commands then clean up and exit.
  void CloseStdin() { process_.CloseStdin(); }

  // Sends a signal (no wait).
  void Signal(int sig) { process_.Signal(sig); }
  // Waits for the peer to exit and returns its wait status; kills it after `timeout` (a guard
  // against hangs, reported as DEADLINE_EXCEEDED).
  absl::StatusOr<int> Wait(std::chrono::milliseconds timeout = std::chrono::seconds(30));

 private:
  explicit PeerProcess(Subprocess process) : process_(std::move(process)) {}

  Subprocess process_;
};

// Runs a peer to completion (stdin closed at once): its wait status and whole stdout.
struct PeerResult {
  int status = -1;
  std::string out;
};
absl::StatusOr<PeerResult> RunPeer(const std::string& socket_path, std::vector<std::string> args);

}  // namespace tensorbroker::testing

#endif  // TENSORBROKER_TESTS_INTEGRATION_PEER_PROCESS_H_
