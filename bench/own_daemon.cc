#include "bench/own_daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "bench/report.h"
#include "bench/units.h"
#include "tests/support/daemon_wait.h"

namespace tensorbroker::bench {

OwnDaemon::~OwnDaemon() {
  if (pid_ > 0) (void)Stop();
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

absl::Status OwnDaemon::Start(const std::string& binary, const std::string& capacity, int pin_cpu) {
  std::string tmpl = (std::filesystem::temp_directory_path() / "tbbench.XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) {
    return absl::InternalError(std::string("mkdtemp: ") + strerror(errno));
  }
  dir_ = tmpl;
  socket_ = dir_ + "/broker.sock";
  log_ = dir_ + "/tensorbrokerd.log";
  std::vector<std::string> argv = {binary, "--socket", socket_, "--capacity", capacity};
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  const int log_fd = open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) return absl::InternalError(std::string("open log: ") + strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) {
    close(log_fd);
    return absl::InternalError(std::string("fork: ") + strerror(errno));
  }
  if (pid == 0) {  // child: only async-signal-safe calls until exec
    if (pin_cpu >= 0) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(pin_cpu, &set);
      if (sched_setaffinity(0, sizeof set, &set) != 0) _exit(126);
    } else {
      // Undo the bench's own pinning, if any: the daemon floats.
      cpu_set_t set;
      CPU_ZERO(&set);
      for (int c = 0; c < CPU_SETSIZE; ++c) CPU_SET(c, &set);
      (void)sched_setaffinity(0, sizeof set, &set);
    }
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    execv(args[0], args.data());
    _exit(127);
  }
  close(log_fd);
  pid_ = pid;
  // Wait until it answers Ping: the tests' way (tests/support/daemon_wait.h).
  const testing::WatchedDaemon watched{[this]() -> std::optional<int> {
                                         std::optional<int> status = testing::ReapIfExited(pid_);
                                         if (status.has_value()) pid_ = -1;
                                         return status;
                                       },
                                       [this] { return testing::ReadLogFile(log_); }};
  return testing::WaitForDaemon(watched, "serving on " + socket_,
                                [this] { return testing::PingOn(socket_); });
}

std::string OwnDaemon::Stop() {
  if (pid_ <= 0) return "not running";
  const int64_t t0 = NowNs();
  kill(pid_, SIGTERM);
  int status = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  std::string how;
  while (true) {
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      how = DescribeStatus(status) + " " + FormatNs(static_cast<double>(NowNs() - t0)) +
            " after SIGTERM";
      break;
    }
    if (r < 0 && errno != EINTR) {
      how = std::string("waitpid: ") + strerror(errno);
      break;
    }
    if (Clock::now() > deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      how = "did NOT exit within 10 s of SIGTERM; killed with SIGKILL";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  pid_ = -1;
  clean_exit_ = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  return how;
}

std::string OwnDaemon::LogTail(size_t max_lines) const {
  std::ifstream in(log_);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::string out;
  const size_t from = lines.size() > max_lines ? lines.size() - max_lines : 0;
  for (size_t i = from; i < lines.size(); ++i) out += "  | " + lines[i] + "\n";
  return out.empty() ? "  | (empty)\n" : out;
}

std::string OwnDaemon::DescribeStatus(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("killed by signal ") + strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

}  // namespace tensorbroker::bench
