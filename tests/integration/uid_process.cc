#include "tests/integration/uid_process.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tests/support/daemon_wait.h"

namespace tensorbroker::testing {
namespace {

absl::Status Errno(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

// `env`, plus the sanitizers' settings of this process (suppressions, leak checking) unless
// `env` sets them: a program under test runs as the suite runs it.
std::vector<std::string> WithSanitizerSettings(const std::vector<std::string>& env) {
  std::vector<std::string> environment = env;
  for (const char* name : {"ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "TSAN_OPTIONS"}) {
    const char* value = std::getenv(name);
    const std::string prefix = std::string(name) + "=";
    bool given = false;
    for (const std::string& entry : env) given = given || entry.rfind(prefix, 0) == 0;
    if (value != nullptr && !given) environment.push_back(prefix + value);
  }
  return environment;
}

}  // namespace

absl::StatusOr<UidProcess> UidProcess::Start(uid_t uid, gid_t gid,
                                             const std::vector<std::string>& argv,
                                             const std::vector<std::string>& env) {
  std::vector<std::string> args = argv, environment = WithSanitizerSettings(env);
  std::vector<char*> cargs = CStrings(args), cenv = CStrings(environment);
  const bool same_user = uid == ::geteuid() && gid == ::getegid();  // then nothing to drop
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return Errno("pipe2");
  UniqueFd out_read(out[0]), out_write(out[1]);
  if (::pipe2(err, O_CLOEXEC) != 0) return Errno("pipe2");
  UniqueFd err_read(err[0]), err_write(err[1]);
  const pid_t pid = ::fork();
  if (pid < 0) return Errno("fork");
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (!same_user && (::setgroups(0, nullptr) != 0 || ::setresgid(gid, gid, gid) != 0 ||
                       ::setresuid(uid, uid, uid) != 0)) {
      _exit(126);
    }
    ::dup2(out_write.get(), STDOUT_FILENO);
    ::dup2(err_write.get(), STDERR_FILENO);
    ::chdir("/");
    ::execve(cargs[0], cargs.data(), cenv.data());
    _exit(127);
  }
  UidProcess process;
  process.pid_ = pid;
  process.out_ = std::move(out_read);
  process.err_ = std::move(err_read);
  return process;
}

UidProcess::UidProcess(UidProcess&& other) noexcept { *this = std::move(other); }

UidProcess& UidProcess::operator=(UidProcess&& other) noexcept {
  std::swap(pid_, other.pid_);
  std::swap(reaped_status_, other.reaped_status_);
  std::swap(out_, other.out_);
  std::swap(err_, other.err_);
  std::swap(err_so_far_, other.err_so_far_);
  return *this;
}

UidProcess::~UidProcess() {
  if (pid_ > 0 && reaped_status_ == -1) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

std::optional<int> UidProcess::ExitStatus() {
  if (reaped_status_ == -1) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) != pid_) return std::nullopt;
    reaped_status_ = status;
  }
  return reaped_status_;
}

std::string UidProcess::ErrSoFar() {
  char buffer[4096];
  while (true) {
    pollfd ready{err_.get(), POLLIN, 0};
    if (::poll(&ready, 1, 0) <= 0 || (ready.revents & (POLLIN | POLLHUP)) == 0) break;
    const ssize_t n = ::read(err_.get(), buffer, sizeof(buffer));
    if (n <= 0) break;  // the end (Finish reads it again and sees it too) or an error
    err_so_far_.append(buffer, static_cast<size_t>(n));
  }
  return err_so_far_;
}

absl::StatusOr<ProcessOutput> UidProcess::Finish(int signal) {
  if (signal != 0 && reaped_status_ == -1) ::kill(pid_, signal);
  ProcessOutput output;
  output.err = std::move(err_so_far_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  pollfd fds[2] = {{out_.get(), POLLIN, 0}, {err_.get(), POLLIN, 0}};
  std::string* texts[2] = {&output.out, &output.err};
  int open = 2;
  while (open > 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid_, SIGKILL);
      return absl::DeadlineExceededError(absl::StrCat("pid ", pid_, " did not finish in 30 s"));
    }
    if (::poll(fds, 2, 100) < 0 && errno != EINTR) return Errno("poll");
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buffer[4096];
      const ssize_t n = ::read(fds[i].fd, buffer, sizeof(buffer));
      if (n > 0) {
        texts[i]->append(buffer, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        fds[i].fd = -1;
        --open;
      }
    }
  }
  if (reaped_status_ == -1 && ::waitpid(pid_, &reaped_status_, 0) != pid_) return Errno("waitpid");
  output.status = reaped_status_;
  return output;
}

absl::StatusOr<ProcessOutput> RunAs(uid_t uid, gid_t gid, const std::vector<std::string>& argv,
                                    const std::vector<std::string>& env) {
  auto process = UidProcess::Start(uid, gid, argv, env);
  if (!process.ok()) return process.status();
  return process->Finish();
}

absl::Status WaitUntilListening(const std::string& socket_path, UidProcess& process) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  socket_path.copy(address.sun_path, sizeof(address.sun_path) - 1);
  return WaitForDaemon(
      {[&] { return process.ExitStatus(); }, [&] { return process.ErrSoFar(); }},
      absl::StrCat("listening on ", socket_path), [&] {
        UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
        if (::connect(probe.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) ==
            0) {
          return absl::OkStatus();
        }
        return absl::UnavailableError(absl::StrCat("connect: ", std::strerror(errno)));
      });
}

}  // namespace tensorbroker::testing
