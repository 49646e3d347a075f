#include "tests/integration/uid_process.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "tests/support/daemon_wait.h"

namespace tensorbroker::testing {
namespace {

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
  SubprocessOptions options;
  options.env = WithSanitizerSettings(env);
  options.exact_env = true;
  options.capture_stdout = true;
  options.capture_stderr = true;
  options.death_signal = SIGKILL;
  options.working_dir = "/";
  if (uid != ::geteuid() || gid != ::getegid()) options.run_as = RunAsUser{uid, gid};
  auto process = Subprocess::Spawn(argv, options);
  if (!process.ok()) return process.status();
  return UidProcess(*std::move(process));
}

absl::StatusOr<ProcessOutput> UidProcess::Finish(int signal) {
  if (signal != 0) process_.Signal(signal);
  const pid_t pid = process_.pid();
  auto output = process_.Finish(absl::Seconds(30));
  if (absl::IsDeadlineExceeded(output.status())) {
    return absl::DeadlineExceededError(absl::StrCat("pid ", pid, " did not finish in 30 s"));
  }
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
