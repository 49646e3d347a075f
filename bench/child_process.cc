#include "bench/child_process.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <sstream>

namespace tensorbroker::bench {

int64_t CpuNs(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {  // fields 14 and 15 (1-based)
    if (i == 14) utime = std::stoll(field);
    if (i == 15) stime = std::stoll(field);
  }
  return (utime + stime) * (1000000000LL / sysconf(_SC_CLK_TCK));
}

absl::StatusOr<Child> Spawn(const std::vector<std::string>& args,
                            const std::vector<std::string>& env) {
  int to_child[2], from_child[2];
  if (pipe2(to_child, O_CLOEXEC) != 0 || pipe2(from_child, O_CLOEXEC) != 0) {
    return absl::InternalError("pipe2 failed");
  }
  std::vector<std::string> storage = args;
  std::vector<char*> argv;
  for (std::string& a : storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_storage = env;
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    dup2(to_child[0], STDIN_FILENO);
    dup2(from_child[1], STDOUT_FILENO);
    for (std::string& e : env_storage) putenv(e.data());
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(to_child[0]);
  close(from_child[1]);
  return Child{pid, fdopen(to_child[1], "w"), fdopen(from_child[0], "r")};
}

std::string ReadLine(FILE* f) {
  char buf[1024];
  if (std::fgets(buf, sizeof buf, f) == nullptr) return "";
  std::string line(buf);
  if (!line.empty() && line.back() == '\n') line.pop_back();
  return line;
}

int Reap(Child& child) {
  if (child.in != nullptr) std::fclose(child.in);
  if (child.out != nullptr) std::fclose(child.out);
  int status = 0;
  waitpid(child.pid, &status, 0);
  return status;
}

}  // namespace tensorbroker::bench
