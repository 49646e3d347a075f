#include "bench/own_daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <vector>

#include "bench/report.h"
#include "bench/units.h"
#include "common/unique_fd.h"
#include "tests/support/daemon_wait.h"

namespace tensorbroker::bench {

OwnDaemon::~OwnDaemon() {
  if (process_.pid() > 0) (void)Stop();
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
  const int log_fd = open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) return absl::InternalError(std::string("open log: ") + strerror(errno));
  const UniqueFd log(log_fd);
  testing::SubprocessOptions options;
  options.stdout_fd = options.stderr_fd = log.get();
  cpu_set_t set;
  CPU_ZERO(&set);
  if (pin_cpu >= 0) {
    CPU_SET(pin_cpu, &set);
  } else {
    // Undo the bench's own pinning, if any: the daemon floats.
    for (int c = 0; c < CPU_SETSIZE; ++c) CPU_SET(c, &set);
  }
  options.cpu_affinity = set;
  auto process = testing::Subprocess::Spawn(argv, options);
  if (!process.ok()) return process.status();
  process_ = *std::move(process);
  // Wait until it answers Ping: the tests' way (tests/support/daemon_wait.h).
  const testing::WatchedDaemon watched{[this] { return process_.ExitStatus(); },
                                       [this] { return testing::ReadLogFile(log_); }};
  return testing::WaitForDaemon(watched, "serving on " + socket_,
                                [this] { return testing::PingOn(socket_); });
}

std::string OwnDaemon::Stop() {
  if (process_.pid() <= 0) return "not running";
  const int64_t t0 = NowNs();
  absl::StatusOr<int> status = process_.Stop(SIGTERM, absl::Seconds(10));
  clean_exit_ = status.ok() && WIFEXITED(*status) && WEXITSTATUS(*status) == 0;
  if (status.ok()) {
    return DescribeStatus(*status) + " " + FormatNs(static_cast<double>(NowNs() - t0)) +
           " after SIGTERM";
  }
  if (absl::IsDeadlineExceeded(status.status())) {
    return "did NOT exit within 10 s of SIGTERM; killed with SIGKILL";
  }
  return std::string(status.status().message());
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
