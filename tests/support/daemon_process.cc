#include "tests/support/daemon_process.h"

#include <signal.h>
#include <stdlib.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/support/daemon_wait.h"

namespace tensorbroker::testing {
namespace {

// How long the pipe of a daemon that has exited may take to end: a bound against a process
// that still holds it (none should), not a measurement; a loaded machine may take its time to
// read the last of it, and a log cut short fails the tests that quote it.
constexpr absl::Duration kLogEndBound = absl::Seconds(60);

}  // namespace

std::string DaemonBinaryPath() {
  if (const char* env = std::getenv("TENSORBROKERD"); env != nullptr && *env != '\0') return env;
  return TENSORBROKERD_PATH;
}

absl::StatusOr<DaemonProcess> DaemonProcess::Start(std::vector<std::string> extra_args,
                                                   const std::vector<std::string>& launcher) {
  std::string dir_template = (std::filesystem::temp_directory_path() / "tbtest.XXXXXX").string();
  if (mkdtemp(dir_template.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp: ", strerror(errno)));
  }
  auto daemon = StartOn(dir_template + "/broker.sock", std::move(extra_args), launcher);
  if (!daemon.ok()) {
    std::filesystem::remove_all(dir_template);
    return daemon.status();
  }
  daemon->owned_dir_ = dir_template;
  return daemon;
}

absl::StatusOr<DaemonProcess> DaemonProcess::StartOn(const std::string& socket_path,
                                                     std::vector<std::string> extra_args,
                                                     const std::vector<std::string>& launcher) {
  std::vector<std::string> argv = launcher;
  argv.insert(argv.end(), {DaemonBinaryPath(), "--socket", socket_path});
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  auto log = DaemonLog::Create();
  if (!log.ok()) return log.status();
  SubprocessOptions options;
  options.stderr_fd = (*log)->child_end();
  // If the test process dies without stopping us (a crash, a sanitizer abort), the daemon gets
  // SIGTERM and cleans up after itself instead of living on as an orphan.
  options.death_signal = SIGTERM;
  auto process = Subprocess::Spawn(argv, options);
  (*log)->CloseChildEnd();
  if (!process.ok()) return process.status();
  DaemonProcess daemon;
  daemon.process_ = *std::move(process);
  daemon.socket_path_ = socket_path;
  daemon.log_ = *std::move(log);
  const WatchedDaemon watched{[&daemon] { return daemon.process_.ExitStatus(); },
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
  std::swap(process_, other.process_);
  std::swap(socket_path_, other.socket_path_);
  std::swap(owned_dir_, other.owned_dir_);
  std::swap(log_, other.log_);
  return *this;
}

std::string DaemonProcess::Log() const {
  if (log_ == nullptr) return "";
  // Once it has exited, the pipe ends as soon as what it wrote last is read.
  if (process_.pid() <= 0) (void)log_->WaitForEnd(kLogEndBound);
  return log_->Text();
}

absl::Status DaemonProcess::WaitForLogLine(const std::string& text, absl::Duration deadline) const {
  const absl::Time end = absl::Now() + deadline;
  while (true) {
    const std::string log = Log();
    if (absl::StrContains(log, text)) return absl::OkStatus();
    if (absl::Now() > end) {
      return absl::NotFoundError(absl::StrCat("no '", text, "' in the daemon's log:\n", log));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
}

absl::StatusOr<int> DaemonProcess::Stop(int signal) {
  if (process_.pid() <= 0) return absl::FailedPreconditionError("daemon is not running");
  // gRPC's own shutdown (in ~Server) may wait up to 10 s for its backup poller after a large
  // write; sanitizers slow the rest. A hang guard, not a measurement.
  absl::StatusOr<int> status = process_.Stop(signal, absl::Seconds(30));
  // Its last words (a sanitizer's report) are shown before the caller goes on.
  if (log_ != nullptr) (void)log_->WaitForEnd(kLogEndBound);
  if (absl::IsDeadlineExceeded(status.status())) {
    return absl::DeadlineExceededError("tensorbrokerd did not exit within 30 s; killed it");
  }
  return status;
}

DaemonProcess::~DaemonProcess() {
  if (process_.pid() > 0) (void)Stop(SIGTERM);
  if (!owned_dir_.empty()) std::filesystem::remove_all(owned_dir_);
}

}  // namespace tensorbroker::testing
