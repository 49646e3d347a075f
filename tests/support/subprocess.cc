// Implementation of subprocess.h: fork, a fixed list of async-signal-safe steps in the child,
// exec (or the function); pipes read with poll(); waits bounded by polling waitpid(WNOHANG).
#include "tests/support/subprocess.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace tensorbroker::testing {
namespace {

absl::Status Errno(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", strerror(errno)));
}

// A pipe; both ends close-on-exec, so that no other child inherits them.
struct Pipe {
  UniqueFd read, write;
};

absl::StatusOr<Pipe> MakePipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Errno("pipe2");
  return Pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

// This process's environment with `env` ("NAME=value") set over it.
std::vector<std::string> MergedEnvironment(const std::vector<std::string>& env) {
  std::vector<std::string> merged;
  for (char** e = environ; *e != nullptr; ++e) {
    const absl::string_view entry(*e);
    const absl::string_view name = entry.substr(0, entry.find('='));
    const bool replaced = std::any_of(env.begin(), env.end(), [&](const std::string& given) {
      return absl::string_view(given).substr(0, given.find('=')) == name;
    });
    if (!replaced) merged.emplace_back(entry);
  }
  merged.insert(merged.end(), env.begin(), env.end());
  return merged;
}

// Everything the child needs, made before fork(): after it, only async-signal-safe calls.
struct ChildPlan {
  pid_t parent = -1;
  const SubprocessOptions* options = nullptr;
  int stdin_fd = -1, stdout_fd = -1, stderr_fd = -1;  // to become 0, 1, 2 (-1: keep)
  std::vector<int> to_close;                          // every pipe end, after the dup2s
  char** argv = nullptr;                              // Spawn()
  char** envp = nullptr;                              // Spawn(): nullptr keeps environ
  const std::function<int()>* body = nullptr;         // Fork()
};

// The child's side; never returns.
[[noreturn]] void RunChild(const ChildPlan& plan) {
  const SubprocessOptions& options = *plan.options;
  if (options.death_signal != 0) {
    ::prctl(PR_SET_PDEATHSIG, options.death_signal);
    if (::getppid() != plan.parent) ::_exit(127);  // the parent is already gone
  }
  if (options.cpu_affinity.has_value() &&
      ::sched_setaffinity(0, sizeof(cpu_set_t), &*options.cpu_affinity) != 0) {
    ::_exit(126);
  }
  const int targets[3] = {plan.stdin_fd, plan.stdout_fd, plan.stderr_fd};
  for (int target = 0; target < 3; ++target) {  // dup2 clears close-on-exec
    if (targets[target] >= 0 && ::dup2(targets[target], target) < 0) ::_exit(126);
  }
  for (int fd : plan.to_close) ::close(fd);
  if (options.run_as.has_value()) {
    const RunAsUser& user = *options.run_as;
    if (::setgroups(0, nullptr) != 0 || ::setresgid(user.gid, user.gid, user.gid) != 0 ||
        ::setresuid(user.uid, user.uid, user.uid) != 0) {
      ::_exit(126);
    }
  }
  if (!options.working_dir.empty() && ::chdir(options.working_dir.c_str()) != 0) ::_exit(126);
  if (plan.body != nullptr) ::_exit((*plan.body)());
  if (plan.envp != nullptr) {
    ::execve(plan.argv[0], plan.argv, plan.envp);
  } else {
    ::execv(plan.argv[0], plan.argv);
  }
  ::_exit(127);
}

}  // namespace

absl::StatusOr<Subprocess> Subprocess::Spawn(const std::vector<std::string>& argv,
                                             const SubprocessOptions& options) {
  if (argv.empty()) return absl::InvalidArgumentError("Subprocess::Spawn: empty argv");
  return Start(&argv, nullptr, options);
}

absl::StatusOr<Subprocess> Subprocess::Fork(const std::function<int()>& body,
                                            const SubprocessOptions& options) {
  return Start(nullptr, &body, options);
}

absl::StatusOr<Subprocess> Subprocess::Start(const std::vector<std::string>* argv,
                                             const std::function<int()>* body,
                                             const SubprocessOptions& options) {
  Pipe in, out, err;
  for (auto [wanted, pipe] :
       {std::pair{options.pipe_stdin, &in}, std::pair{options.capture_stdout, &out},
        std::pair{options.capture_stderr, &err}}) {
    if (!wanted) continue;
    absl::StatusOr<Pipe> made = MakePipe();
    if (!made.ok()) return made.status();
    *pipe = *std::move(made);
  }
  ChildPlan plan;
  plan.parent = ::getpid();
  plan.options = &options;
  plan.stdin_fd = in.read.get();
  plan.stdout_fd = options.capture_stdout ? out.write.get() : options.stdout_fd;
  plan.stderr_fd = options.capture_stderr ? err.write.get() : options.stderr_fd;
  for (const Pipe* pipe : {&in, &out, &err}) {
    if (pipe->read.valid()) {
      plan.to_close.insert(plan.to_close.end(), {pipe->read.get(), pipe->write.get()});
    }
  }
  std::vector<std::string> args, environment;
  std::vector<char*> cargs, cenv;
  if (argv != nullptr) {
    args = *argv;
    cargs = CStrings(args);
    plan.argv = cargs.data();
    if (options.exact_env || !options.env.empty()) {
      environment = options.exact_env ? options.env : MergedEnvironment(options.env);
      cenv = CStrings(environment);
      plan.envp = cenv.data();
    }
  }
  plan.body = body;
  const pid_t pid = ::fork();
  if (pid < 0) return Errno("fork");
  if (pid == 0) RunChild(plan);
  Subprocess child;
  child.pid_ = pid;
  child.reaped_ = false;
  child.stdin_ = std::move(in.write);  // the child's ends close with `in`, `out`, `err`
  child.stdout_ = std::move(out.read);
  child.stderr_ = std::move(err.read);
  return child;
}

Subprocess::Subprocess(Subprocess&& other) noexcept { *this = std::move(other); }

Subprocess& Subprocess::operator=(Subprocess&& other) noexcept {
  if (this == &other) return *this;
  KillAndReap();
  pid_ = std::exchange(other.pid_, -1);
  reaped_ = std::exchange(other.reaped_, true);
  status_ = other.status_;
  stdin_ = std::move(other.stdin_);
  stdout_ = std::move(other.stdout_);
  stderr_ = std::move(other.stderr_);
  out_ = std::move(other.out_);
  err_ = std::move(other.err_);
  return *this;
}

Subprocess::~Subprocess() { KillAndReap(); }

void Subprocess::KillAndReap() {
  if (reaped_) return;
  ::kill(pid_, SIGKILL);
  while (::waitpid(pid_, &status_, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
}

void Subprocess::Signal(int signal) {
  if (!reaped_) ::kill(pid_, signal);
}

std::optional<int> Subprocess::ExitStatus() {
  if (!reaped_) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) != pid_) return std::nullopt;
    status_ = status;
    reaped_ = true;
  }
  return status_;
}

absl::StatusOr<int> Subprocess::Wait(absl::Duration timeout) {
  if (reaped_) {
    if (pid_ < 0) return absl::FailedPreconditionError("no child process");
    return status_;
  }
  if (timeout == absl::InfiniteDuration()) {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0) {
      if (errno != EINTR) return Errno("waitpid");
    }
    status_ = status;
    reaped_ = true;
    return status_;
  }
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      status_ = status;
      reaped_ = true;
      return status_;
    }
    if (r < 0 && errno != EINTR) return Errno("waitpid");
    if (absl::Now() > deadline) {
      KillAndReap();
      return absl::DeadlineExceededError(absl::StrCat(
          "pid ", pid_, " did not exit within ", absl::FormatDuration(timeout), "; killed it"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

absl::StatusOr<int> Subprocess::Stop(int signal, absl::Duration timeout) {
  Signal(signal);
  return Wait(timeout);
}

absl::Status Subprocess::WriteLine(const std::string& line) {
  if (!stdin_.valid()) return absl::FailedPreconditionError("the child's stdin is closed");
  const std::string data = line + "\n";
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(stdin_.get(), data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("write to the child");
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

int Subprocess::ReadSome(int which, int wait_ms) {
  UniqueFd& fd = which == 1 ? stdout_ : stderr_;
  if (!fd.valid()) return 0;
  pollfd ready{fd.get(), POLLIN, 0};
  const int r = ::poll(&ready, 1, wait_ms);
  if (r <= 0) {
    if (r == 0) errno = EAGAIN;
    return -1;
  }
  char chunk[4096];
  const ssize_t n = ::read(fd.get(), chunk, sizeof(chunk));
  if (n < 0) return -1;
  if (n == 0) {
    fd.reset();  // the end: later reads see it at once
    return 0;
  }
  (which == 1 ? out_ : err_).append(chunk, static_cast<size_t>(n));
  return static_cast<int>(n);
}

namespace {

// Milliseconds left until `deadline`, at most `cap` (poll's timeout; 0 once it has passed).
int MillisecondsLeft(absl::Time deadline, int cap = 100) {
  if (deadline == absl::InfiniteFuture()) return cap;
  const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
  return static_cast<int>(std::clamp<int64_t>(left, 0, cap));
}

absl::Time DeadlineAfter(absl::Duration timeout) {
  return timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + timeout;
}

}  // namespace

absl::StatusOr<std::string> Subprocess::ReadLine(absl::Duration timeout) {
  const absl::Time deadline = DeadlineAfter(timeout);
  while (true) {
    if (const size_t nl = out_.find('\n'); nl != std::string::npos) {
      std::string line = out_.substr(0, nl);
      out_.erase(0, nl + 1);
      return line;
    }
    if (!stdout_.valid()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the child closed its output; unterminated rest: '", out_, "'"));
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("the child printed no line within ",
                                                      absl::FormatDuration(timeout), "; partial: '",
                                                      out_, "'"));
    }
    if (ReadSome(1, MillisecondsLeft(deadline)) < 0 && errno != EAGAIN && errno != EINTR) {
      return Errno("read the child's stdout");
    }
  }
}

absl::StatusOr<std::string> Subprocess::ReadToEnd(absl::Duration timeout) {
  const absl::Time deadline = DeadlineAfter(timeout);
  while (stdout_.valid()) {
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("the child's output did not end within ", absl::FormatDuration(timeout)));
    }
    if (ReadSome(1, MillisecondsLeft(deadline)) < 0 && errno != EAGAIN && errno != EINTR) {
      return Errno("read the child's stdout");
    }
  }
  return std::exchange(out_, "");
}

std::string Subprocess::StderrSoFar() {
  while (ReadSome(2, 0) > 0) {
  }
  return err_;
}

absl::StatusOr<ProcessOutput> Subprocess::Finish(absl::Duration timeout) {
  const absl::Time deadline = DeadlineAfter(timeout);
  while (stdout_.valid() || stderr_.valid()) {
    if (absl::Now() >= deadline) {
      KillAndReap();
      return absl::DeadlineExceededError(absl::StrCat(
          "pid ", pid_, " did not finish within ", absl::FormatDuration(timeout), "; killed it"));
    }
    pollfd fds[2] = {{stdout_.get(), POLLIN, 0}, {stderr_.get(), POLLIN, 0}};
    if (::poll(fds, 2, MillisecondsLeft(deadline)) < 0 && errno != EINTR) return Errno("poll");
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd >= 0 && fds[i].revents != 0 && ReadSome(i + 1, 0) < 0 && errno != EAGAIN &&
          errno != EINTR) {
        return Errno("read the child's output");
      }
    }
  }
  absl::StatusOr<int> status = Wait(std::max(deadline - absl::Now(), absl::ZeroDuration()));
  if (!status.ok()) return status.status();
  return ProcessOutput{*status, std::exchange(out_, ""), std::exchange(err_, "")};
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return absl::StrCat("killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)),
                        ")");
  }
  return absl::StrCat("wait status ", status);
}

}  // namespace tensorbroker::testing
