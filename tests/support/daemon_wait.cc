#include "tests/support/daemon_wait.h"

#include <sys/wait.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tensorbroker/client.h"

namespace tensorbroker::testing {

absl::Status WaitForDaemon(const WatchedDaemon& daemon, absl::string_view state,
                           const std::function<absl::Status()>& reached, absl::Duration deadline,
                           absl::Duration step) {
  const absl::Time give_up = absl::Now() + deadline;
  while (true) {
    if (std::optional<int> status = daemon.exit_status(); status.has_value()) {
      return absl::InternalError(absl::StrCat("tensorbrokerd exited (", DescribeExit(*status),
                                              ") before it was ", state, "; its log:\n",
                                              QuoteLastLines(daemon.log())));
    }
    const absl::Status answer = reached();
    if (answer.ok()) return answer;
    if (absl::Now() >= give_up) {
      return absl::DeadlineExceededError(
          absl::StrCat("tensorbrokerd is not ", state, " after ", absl::FormatDuration(deadline),
                       " (", answer.ToString(), "); its log:\n", QuoteLastLines(daemon.log())));
    }
    absl::SleepFor(step);
  }
}

std::optional<int> ReapIfExited(pid_t pid) {
  if (pid <= 0) return std::nullopt;  // waitpid would take any child of ours
  int status = 0;
  if (::waitpid(pid, &status, WNOHANG) == pid) return status;
  return std::nullopt;
}

std::string ReadLogFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::Status PingOn(const std::string& socket_path) {
  auto client = Client::Connect(socket_path, std::chrono::milliseconds(500));
  if (!client.ok()) return client.status();
  return (*client)->Ping();
}

std::string DescribeExit(int wait_status) {
  if (WIFEXITED(wait_status)) return absl::StrCat("exit status ", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    return absl::StrCat("killed by signal ", WTERMSIG(wait_status), " (",
                        ::strsignal(WTERMSIG(wait_status)), ")");
  }
  return absl::StrCat("wait status ", wait_status);
}

std::string QuoteLastLines(absl::string_view text, size_t lines) {
  if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  if (text.empty()) return "  | (empty)\n";
  const std::vector<absl::string_view> all = absl::StrSplit(text, '\n');
  const size_t from = all.size() > lines ? all.size() - lines : 0;
  std::string quoted;
  if (from > 0) absl::StrAppend(&quoted, "  | (", from, " earlier lines left out)\n");
  for (size_t i = from; i < all.size(); ++i) absl::StrAppend(&quoted, "  | ", all[i], "\n");
  return quoted;
}

}  // namespace tensorbroker::testing
