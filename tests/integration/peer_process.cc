// Implementation of peer_process.h: fork+execv with pipes, line reads with poll().
#include "tests/integration/peer_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tensorbroker::testing {
namespace {

absl::Status Errno(const char* what) {
  return absl::InternalError(absl::StrCat(what, ": ", strerror(errno)));
}

}  // namespace

std::string PeerBinaryPath() { return TENSORBROKER_TEST_PEER_PATH; }

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return absl::StrCat("killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)),
                        ")");
  }
  return absl::StrCat("wait status ", status);
}

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
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);

  // O_CLOEXEC: no other child (the daemon, other peers) inherits these ends, so EOF works.
  int in_pipe[2], out_pipe[2];
  if (pipe2(in_pipe, O_CLOEXEC) != 0) return Errno("pipe2");
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    close(in_pipe[0]);
    close(in_pipe[1]);
    return Errno("pipe2");
  }
  const pid_t pid = fork();
  if (pid < 0) return Errno("fork");
  if (pid == 0) {
    // Only async-signal-safe calls between fork and exec. A peer dies with the test process.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    dup2(in_pipe[0], STDIN_FILENO);
    dup2(out_pipe[1], STDOUT_FILENO);
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  close(in_pipe[0]);
  close(out_pipe[1]);
  PeerProcess peer;
  peer.pid_ = pid;
  peer.stdin_fd_ = in_pipe[1];
  peer.stdout_fd_ = out_pipe[0];
  return peer;
}

PeerProcess::PeerProcess(PeerProcess&& other) noexcept { *this = std::move(other); }

PeerProcess& PeerProcess::operator=(PeerProcess&& other) noexcept {
  std::swap(pid_, other.pid_);
  std::swap(stdin_fd_, other.stdin_fd_);
  std::swap(stdout_fd_, other.stdout_fd_);
  std::swap(buffer_, other.buffer_);
  std::swap(eof_, other.eof_);
  return *this;
}

PeerProcess::~PeerProcess() { Reset(); }

void PeerProcess::Reset() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    int status;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  CloseStdin();
  if (stdout_fd_ >= 0) close(stdout_fd_);
  stdout_fd_ = -1;
}

absl::StatusOr<std::string> PeerProcess::ReadLine(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (const size_t nl = buffer_.find('\n'); nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    if (eof_ || stdout_fd_ < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("peer closed its output; unterminated rest: '", buffer_, "'"));
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return absl::DeadlineExceededError(absl::StrCat(
          "peer printed no line within ", timeout.count(), " ms; partial: '", buffer_, "'"));
    }
    pollfd pfd{stdout_fd_, POLLIN, 0};
    const int r = poll(&pfd, 1, static_cast<int>(left.count()));
    if (r < 0 && errno != EINTR) return Errno("poll");
    if (r <= 0) continue;
    char chunk[4096];
    const ssize_t n = read(stdout_fd_, chunk, sizeof(chunk));
    if (n < 0 && errno != EINTR) return Errno("read");
    if (n == 0) eof_ = true;
    if (n > 0) buffer_.append(chunk, static_cast<size_t>(n));
  }
}

absl::StatusOr<std::string> PeerProcess::ReadToEnd(std::chrono::milliseconds timeout) {
  std::string all;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    auto line = ReadLine(std::max(left, std::chrono::milliseconds(1)));
    if (line.ok()) {
      absl::StrAppend(&all, *line, "\n");
      continue;
    }
    if (absl::IsFailedPrecondition(line.status())) return all + buffer_;
    return line.status();
  }
}

absl::Status PeerProcess::WriteLine(const std::string& line) {
  if (stdin_fd_ < 0) return absl::FailedPreconditionError("peer stdin is closed");
  const std::string data = line + "\n";
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(stdin_fd_, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("write to peer");
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

void PeerProcess::CloseStdin() {
  if (stdin_fd_ >= 0) close(stdin_fd_);
  stdin_fd_ = -1;
}

void PeerProcess::Signal(int sig) {
  if (pid_ > 0) kill(pid_, sig);
}

absl::StatusOr<int> PeerProcess::Wait(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return absl::FailedPreconditionError("peer already reaped");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (true) {
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) break;
    if (r < 0 && errno != EINTR) return Errno("waitpid");
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      pid_ = -1;
      return absl::DeadlineExceededError(
          absl::StrCat("peer did not exit within ", timeout.count(), " ms; killed it"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  pid_ = -1;
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
