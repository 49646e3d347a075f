// Implementation of peer_process.h: the peer is a Subprocess (tests/support/subprocess.h).
#include "tests/integration/peer_process.h"

#include <signal.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tensorbroker::testing {
namespace {

absl::Duration ToDuration(std::chrono::milliseconds timeout) {
  return absl::Milliseconds(timeout.count());
}

}  // namespace

std::string PeerBinaryPath() { return TENSORBROKER_TEST_PEER_PATH; }

absl::StatusOr<PeerProcess> PeerProcess::Start(const std::string& socket_path,
                                               std::vector<std::string> args) {
  return StartProgram(PeerBinaryPath(), socket_path, std::move(args));
}

absl::StatusOr<PeerProcess> PeerProcess::StartProgram(const std::string& program,
                                                      const std::string& socket_path,
                                                      std::vector<std::string> args) {
  // A peer that died must not kill the test with SIGPIPE when we write to it.
  signal(SIGPIPE, SIG_IGN);
  std::vector<std::string> argv = {program};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("--socket");
  argv.push_back(socket_path);
  SubprocessOptions options;
  options.pipe_stdin = true;
  options.capture_stdout = true;
  options.death_signal = SIGKILL;  // a peer dies with the test process
  auto process = Subprocess::Spawn(argv, options);
  if (!process.ok()) return process.status();
  return PeerProcess(*std::move(process));
}

absl::StatusOr<std::string> PeerProcess::ReadLine(std::chrono::milliseconds timeout) {
  auto line = process_.ReadLine(ToDuration(timeout));
  if (line.ok() || absl::IsFailedPrecondition(line.status())) return line;
  if (absl::IsDeadlineExceeded(line.status())) {
    return absl::DeadlineExceededError(absl::StrCat("peer printed no line within ", timeout.count(),
                                                    " ms (", line.status().message(), ")"));
  }
  return line.status();
}

absl::StatusOr<std::string> PeerProcess::ReadToEnd(std::chrono::milliseconds timeout) {
  return process_.ReadToEnd(ToDuration(timeout));
}

absl::Status PeerProcess::WriteLine(const std::string& line) { return process_.WriteLine(line); }

absl::StatusOr<int> PeerProcess::Wait(std::chrono::milliseconds timeout) {
  auto status = process_.Wait(ToDuration(timeout));
  if (absl::IsDeadlineExceeded(status.status())) {
    return absl::DeadlineExceededError(
        absl::StrCat("peer did not exit within ", timeout.count(), " ms; killed it"));
  }
  return status;
}

absl::StatusOr<PeerResult> RunPeer(const std::string& socket_path, std::vector<std::string> args) {
  auto peer = PeerProcess::Start(socket_path, std::move(args));
  if (!peer.ok()) return peer.status();
  peer->CloseStdin();
  PeerResult result;
  auto out = peer->ReadToEnd();
  if (!out.ok()) return out.status();
  result.out = *std::move(out);
  auto status = peer->Wait();
  if (!status.ok()) return status.status();
  result.status = *status;
  return result;
}

}  // namespace tensorbroker::testing
