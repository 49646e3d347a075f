#include "tests/support/daemon_process.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "tests/support/daemon_wait.h"

namespace tensorbroker::testing {
namespace {

// How long the pipe of a daemon that has exited may take to end: a bound against a process
// that still holds it (none should), not a measurement; a loaded machine may take its time to
// read the last of it, and a log cut short fails the tests that quote it.
constexpr absl::Duration kLogEndBound = absl::Seconds(60);

// `stderr_fd`: the child's descriptor 2.
absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, int stderr_fd) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  if (pid == 0) {
    // If the test process dies without stopping us (a crash, a sanitizer abort), the daemon
    // gets SIGTERM and cleans up after itself instead of living on as an orphan.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() == 1) _exit(127);  // the parent is already gone
    if (dup2(stderr_fd, STDERR_FILENO) < 0) _exit(126);
    execv(args[0], args.data());
    _exit(127);
  }
  return pid;
}

}  // namespace

std::string DaemonBinaryPath() {
  if (const char* env = std::getenv("TENSORBROKERD"); env != nullptr && *env != '\0') return env;
  return TENSORBROKERD_PATH;
}

absl::StatusOr<DaemonProcess> DaemonProcess::Start(std::vector<std::string> extra_args) {
  std::string dir_template = (std::filesystem::temp_directory_path() / "tbtest.XXXXXX").string();
  if (mkdtemp(dir_template.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp: ", strerror(errno)));
  }
  auto daemon = StartOn(dir_template + "/broker.sock", std::move(extra_args));
  if (!daemon.ok()) {
    std::filesystem::remove_all(dir_template);
    return daemon.status();
  }
  daemon->owned_dir_ = dir_template;
  return daemon;
}

absl::StatusOr<DaemonProcess> DaemonProcess::StartOn(const std::string& socket_path,
                                                     std::vector<std::string> extra_args) {
  std::vector<std::string> argv = {DaemonBinaryPath(), "--socket", socket_path};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  auto log = DaemonLog::Create();
  if (!log.ok()) return log.status();
  auto pid = Spawn(argv, (*log)->child_end());
  (*log)->CloseChildEnd();
  if (!pid.ok()) return pid.status();
  DaemonProcess daemon;
  daemon.pid_ = *pid;
  daemon.socket_path_ = socket_path;
  daemon.log_ = *std::move(log);
  const WatchedDaemon watched{[&daemon]() -> std::optional<int> {
                                std::optional<int> status = ReapIfExited(daemon.pid_);
                                if (status.has_value()) daemon.pid_ = -1;  // nothing left to stop
                                return status;
                              },
                              [&daemon] { return daemon.Log(); }};
  if (absl::Status s = WaitForDaemon(watched, absl::StrCat("serving on ", socket_path),
                                     [&] { return PingOn(socket_path); });
      !s.ok()) {
    return s;  // the destructor stops a daemon still running
  }
  return daemon;
}

DaemonProcess::DaemonProcess(DaemonProcess&& other) noexcept { *this = std::move(other); }

DaemonProcess& DaemonProcess::operator=(DaemonProcess&& other) noexcept {
  std::swap(pid_, other.pid_);
  std::swap(socket_path_, other.socket_path_);
  std::swap(owned_dir_, other.owned_dir_);
  std::swap(log_, other.log_);
  return *this;
}

std::string DaemonProcess::Log() const {
  if (log_ == nullptr) return "";
  // Once it has exited, the pipe ends as soon as what it wrote last is read.
  if (pid_ <= 0) (void)log_->WaitForEnd(kLogEndBound);
  return log_->Text();
}

absl::StatusOr<int> DaemonProcess::Stop(int signal) {
  if (pid_ <= 0) return absl::FailedPreconditionError("daemon is not running");
  kill(pid_, signal);
  // gRPC's own shutdown (in ~Server) may wait up to 10 s for its backup poller after a large
  // write; sanitizers slow the rest. A hang guard, not a measurement.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  int status = 0;
  while (waitpid(pid_, &status, WNOHANG) != pid_) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      pid_ = -1;
      if (log_ != nullptr) (void)log_->WaitForEnd(kLogEndBound);
      return absl::DeadlineExceededError("tensorbrokerd did not exit within 30 s; killed it");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  pid_ = -1;
  // Its last words (a sanitizer's report) are shown before the caller goes on.
  if (log_ != nullptr) (void)log_->WaitForEnd(kLogEndBound);
  return status;
}

DaemonProcess::~DaemonProcess() {
  if (pid_ > 0) (void)Stop(SIGTERM);
  if (!owned_dir_.empty()) std::filesystem::remove_all(owned_dir_);
}

}  // namespace tensorbroker::testing
