#include "bench/local_path.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/child_process.h"
#include "bench/units.h"
#include "tensorbroker/client.h"

namespace tensorbroker::bench {
namespace {

int CyclesPerChild(const Options& opt) { return std::max(opt.iterations, 10000); }

}  // namespace

absl::Status BenchRawRoundTrip(const Options& opt, Report& rep) {
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
    return absl::InternalError("socketpair failed");
  }
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {  // the echo: only read and write until the parent closes its end
    close(pair[0]);
    char byte;
    while (read(pair[1], &byte, 1) == 1) {
      if (write(pair[1], &byte, 1) != 1) break;
    }
    _exit(0);
  }
  close(pair[1]);
  std::vector<int64_t> ns;
  char byte = 'x';
  bool ok = true;
  for (int i = 0; i < opt.warmup + opt.iterations && ok; ++i) {
    const int64_t start = NowNs();
    ok = write(pair[0], &byte, 1) == 1 && read(pair[0], &byte, 1) == 1;
    if (i >= opt.warmup) ns.push_back(NowNs() - start);
  }
  close(pair[0]);
  waitpid(pid, nullptr, 0);
  if (!ok) return absl::InternalError("the echo child stopped answering");
  rep.Add("raw_unix_rtt", "C++: raw Unix socket round trip, two processes", ns);
  return absl::OkStatus();
}

absl::Status BenchPython(const Options& opt, const std::string& socket, Report& rep) {
  auto child = Spawn({opt.python, opt.python_bench, socket, std::to_string(opt.iterations),
                      std::to_string(opt.warmup)},
                     {"PYTHONPATH=" + opt.python_path});
  if (!child.ok()) return child.status();
  std::fclose(child->in);
  child->in = nullptr;
  int rows = 0;
  for (std::string line = ReadLine(child->out); !line.empty(); line = ReadLine(child->out)) {
    std::istringstream in(line);
    std::string word, key;
    Summary s;
    if (!(in >> word >> key >> s.median >> s.p10 >> s.p90 >> s.n) || word != "row") continue;
    std::string label;
    std::getline(in, label);
    rep.AddSummary(key, label.substr(label.find_first_not_of(' ')), s);
    ++rows;
  }
  const int status = Reap(*child);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || rows == 0) {
    return absl::InternalError(absl::StrCat(opt.python, " ", opt.python_bench, " failed (", rows,
                                            " rows, status ", status, ")"));
  }
  return absl::OkStatus();
}

absl::Status BenchConsumers(const Options& opt, const std::string& self, const std::string& socket,
                            const std::string& name, pid_t daemon_pid, Report& rep) {
  for (int k : {1, 2, 4}) {
    std::vector<Child> children;
    for (int i = 0; i < k; ++i) {
      // At least 10,000 cycles each: the daemon's CPU time is counted in clock ticks (10 ms).
      auto child = Spawn({self, "--child-cycles", name, "--socket", socket, "--iterations",
                          std::to_string(CyclesPerChild(opt))});
      if (!child.ok()) return child.status();
      children.push_back(*child);
    }
    for (Child& c : children) {
      if (ReadLine(c.out) != "ready") return absl::InternalError("a consumer child did not start");
    }
    const int64_t cpu_before = daemon_pid > 0 ? CpuNs(daemon_pid) : -1;
    const int64_t start = NowNs();
    for (Child& c : children) {
      std::fputs("go\n", c.in);
      std::fflush(c.in);
    }
    for (Child& c : children) {
      if (ReadLine(c.out).rfind("done", 0) != 0) {
        return absl::InternalError("a consumer child failed");
      }
    }
    const int64_t wall = NowNs() - start;
    const int64_t cpu_after = daemon_pid > 0 ? CpuNs(daemon_pid) : -1;
    for (Child& c : children) Reap(c);
    const double cycles = static_cast<double>(k) * CyclesPerChild(opt);
    Summary s;
    s.median = s.p10 = s.p90 = static_cast<double>(wall) / cycles;
    s.n = static_cast<size_t>(cycles);
    rep.AddSummary(absl::StrCat("consumers_", k, "_cycle"),
                   absl::StrCat(k, " consumer process", k > 1 ? "es" : "",
                                " cycling at once: wall time per cycle"),
                   s);
    rep.AddFigure(absl::StrCat("consumers_", k, "_cycles_per_s"),
                  absl::StrCat(k, " consumer(s): aggregate Get+release cycles per second"),
                  cycles / (static_cast<double>(wall) / 1e9), "/s");
    if (cpu_before >= 0 && cpu_after >= 0) {
      rep.AddFigure(absl::StrCat("consumers_", k, "_daemon_cpu_per_cycle_us"),
                    absl::StrCat(k, " consumer(s): daemon CPU time per cycle"),
                    static_cast<double>(cpu_after - cpu_before) / cycles / 1e3, "us");
    }
  }
  return absl::OkStatus();
}

int ChildCycles(const Options& opt) {
  auto client = Client::Connect(opt.socket);
  if (!client.ok()) {
    std::fprintf(stderr, "child: Connect: %s\n", client.status().ToString().c_str());
    return 1;
  }
  std::printf("ready\n");
  std::fflush(stdout);
  char go[16];
  if (std::fgets(go, sizeof go, stdin) == nullptr) return 1;
  const int64_t start = NowNs();
  for (int i = 0; i < opt.iterations; ++i) {
    auto t = (*client)->Get(opt.child_cycles);
    if (!t.ok()) {
      std::fprintf(stderr, "child: Get: %s\n", t.status().ToString().c_str());
      return 1;
    }
    (*t)->deleter(*t);
  }
  std::printf("done %lld\n", static_cast<long long>(NowNs() - start));
  std::fflush(stdout);
  return 0;
}

}  // namespace tensorbroker::bench
