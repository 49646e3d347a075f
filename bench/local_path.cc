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
#include "bench/units.h"
#include "tensorbroker/client.h"
#include "tests/support/process_footprint.h"
#include "tests/support/subprocess.h"

namespace tensorbroker::bench {
namespace {

using testing::CpuTimeNs;
using testing::ProcessOutput;
using testing::Subprocess;
using testing::SubprocessOptions;

int CyclesPerChild(const Options& opt) { return std::max(opt.iterations, 10000); }

}  // namespace

absl::Status BenchRawRoundTrip(const Options& opt, Report& rep) {
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
    return absl::InternalError("socketpair failed");
  }
  // The echo: only reads and writes until the parent closes its end.
  auto echo = Subprocess::Fork([&pair]() -> int {
    close(pair[0]);
    char byte;
    while (read(pair[1], &byte, 1) == 1) {
      if (write(pair[1], &byte, 1) != 1) break;
    }
    return 0;
  });
  if (!echo.ok()) {
    close(pair[0]);
    close(pair[1]);
    return absl::InternalError("fork failed");
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
  (void)echo->Wait();
  if (!ok) return absl::InternalError("the echo child stopped answering");
  rep.Add("raw_unix_rtt", "C++: raw Unix socket round trip, two processes", ns);
  return absl::OkStatus();
}

absl::Status BenchPython(const Options& opt, const std::string& socket, Report& rep) {
  SubprocessOptions options;
  options.env = {"PYTHONPATH=" + opt.python_path};
  options.pipe_stdin = true;  // closed at once: its stdin is at its end
  options.capture_stdout = true;
  auto child = Subprocess::Spawn({opt.python, opt.python_bench, socket,
                                  std::to_string(opt.iterations), std::to_string(opt.warmup)},
                                 options);
  if (!child.ok()) return child.status();
  child->CloseStdin();
  int rows = 0;
  for (std::string line = child->ReadLine().value_or(""); !line.empty();
       line = child->ReadLine().value_or("")) {
    std::istringstream in(line);
    std::string word, key;
    Summary s;
    if (!(in >> word >> key >> s.median >> s.p10 >> s.p90 >> s.n) || word != "row") continue;
    std::string label;
    std::getline(in, label);
    rep.AddSummary(key, label.substr(label.find_first_not_of(' ')), s);
    ++rows;
  }
  const absl::StatusOr<ProcessOutput> done = child->Finish();  // reads what no row took
  const int status = done.ok() ? done->status : 0;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || rows == 0) {
    return absl::InternalError(absl::StrCat(opt.python, " ", opt.python_bench, " failed (", rows,
                                            " rows, status ", status, ")"));
  }
  return absl::OkStatus();
}

absl::Status BenchConsumers(const Options& opt, const std::string& self, const std::string& socket,
                            const std::string& name, pid_t daemon_pid, Report& rep) {
  for (int k : {1, 2, 4}) {
    std::vector<Subprocess> children;
    SubprocessOptions options;  // a line protocol on stdin and stdout
    options.pipe_stdin = true;
    options.capture_stdout = true;
    for (int i = 0; i < k; ++i) {
      // At least 10,000 cycles each: the daemon's CPU time is counted in clock ticks (10 ms).
      auto child = Subprocess::Spawn({self, "--child-cycles", name, "--socket", socket,
                                      "--iterations", std::to_string(CyclesPerChild(opt))},
                                     options);
      if (!child.ok()) return child.status();
      children.push_back(*std::move(child));
    }
    for (Subprocess& c : children) {
      if (c.ReadLine().value_or("") != "ready") {
        return absl::InternalError("a consumer child did not start");
      }
    }
    const int64_t cpu_before = daemon_pid > 0 ? CpuTimeNs(daemon_pid) : -1;
    const int64_t start = NowNs();
    for (Subprocess& c : children) (void)c.WriteLine("go");
    for (Subprocess& c : children) {
      if (c.ReadLine().value_or("").rfind("done", 0) != 0) {
        return absl::InternalError("a consumer child failed");
      }
    }
    const int64_t wall = NowNs() - start;
    const int64_t cpu_after = daemon_pid > 0 ? CpuTimeNs(daemon_pid) : -1;
    for (Subprocess& c : children) {
      c.CloseStdin();
      (void)c.Wait();
    }
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
  ConnectOptions connect;  // the round-trip path, as the parent's
  connect.socket_path = opt.socket;
  connect.fast_reads = false;
  auto client = Client::Connect(connect);
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
