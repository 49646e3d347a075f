// tensorbroker_load_bench: how the broker behaves with many clients, as figures (no pass/fail).
// For each workload and each number N of client processes (1, 2, 4, 8, 16 by default), N
// processes (this program, exec'ed with --child) cycle at once for --seconds:
//   get/release   Get of one published 4 KiB tensor, then its deleter (the lease's release):
//                 from the directory, with no message to the daemon (reads without a round
//                 trip, the default), and with a round trip (ConnectOptions::fast_reads false)
//   put/delete    Put of a 4 KiB tensor under the process's own name, then Delete
// and it prints per N: the p50 and p99 of a cycle's latency (every cycle of every process),
// the aggregate rate (all cycles / the longest process's time), the daemon's CPU time (user +
// system) per cycle, and the daemon's descriptors, threads and memory before and after.
// It starts its own tensorbrokerd (the build tree's; $TENSORBROKERD overrides it).
//
// Usage: tensorbroker_load_bench [--clients 1,2,4,8,16] [--seconds 3] [--size 4K]
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/report.h"
#include "common/byte_size.h"
#include "common/command_line.h"
#include "tensorbroker/client.h"
#include "tests/support/daemon_process.h"
#include "tests/support/host_tensor.h"
#include "tests/support/process_footprint.h"
#include "tests/support/subprocess.h"

namespace tensorbroker::bench {
namespace {

using Clock = std::chrono::steady_clock;
using testing::CpuTimeNs;
using testing::Describe;
using testing::FootprintOf;
using testing::ProcessFootprint;
using testing::Subprocess;
using testing::SubprocessOptions;

struct Options {
  std::vector<int> clients = {1, 2, 4, 8, 16};
  int seconds = 3;
  uint64_t size = 4096;
  // --child mode (hidden): one client process.
  std::string child, socket, samples;
  int id = 0;
};

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "tensorbroker_load_bench: %s\n", what.c_str());
  std::exit(1);
}

constexpr char kUsage[] =
    "Usage: tensorbroker_load_bench [--clients 1,2,4,8,16] [--seconds 3] [--size 4K]\n";

// The flags' texts as given (the last of each wins); converted by Parse with its own messages.
struct RawFlags {
  std::string clients, seconds, size, id;
};

Options Convert(const RawFlags& raw, Options opt) {
  if (!raw.clients.empty()) {
    opt.clients.clear();
    for (absl::string_view n : absl::StrSplit(raw.clients, ',')) {
      int count = 0;
      if (!absl::SimpleAtoi(n, &count) || count < 1) Die("--clients takes counts like 1,2,4");
      opt.clients.push_back(count);
    }
  }
  if (!raw.seconds.empty()) {
    if (!absl::SimpleAtoi(raw.seconds, &opt.seconds) || opt.seconds < 1) Die("--seconds: >= 1");
  }
  if (!raw.size.empty()) {
    auto size = ParseByteSize(raw.size, "--size");
    if (!size.ok()) Die(std::string(size.status().message()));
    opt.size = *size;
  }
  if (!raw.id.empty()) opt.id = std::atoi(raw.id.c_str());
  return opt;
}

Options Parse(int argc, char** argv) {
  Options opt;
  RawFlags raw;
  CLI::App app;
  app.set_help_flag();  // kUsage is the help
  app.allow_extras();
  bool help = false;
  app.add_flag("-h,--help", help);
  for (auto [flag, text] : {std::pair{"--clients", &raw.clients},
                            {"--seconds", &raw.seconds},
                            {"--size", &raw.size},
                            {"--child", &opt.child},
                            {"--socket", &opt.socket},
                            {"--samples", &opt.samples},
                            {"--id", &raw.id}}) {
    app.add_option(flag, *text)
        ->type_name("a value")
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }
  absl::StatusOr<std::vector<std::string>> extra =
      ParseWithCli11(app, std::vector<std::string>(argv, argv + argc));
  if (!extra.ok()) Die(std::string(extra.status().message()));
  if (help) {
    std::printf("%s", kUsage);
    std::exit(0);
  }
  if (!extra->empty()) Die("unknown argument " + extra->front());
  return Convert(raw, std::move(opt));
}

DLTensor HostBytes(std::vector<uint8_t>& bytes, std::vector<int64_t>& shape) {
  shape = {static_cast<int64_t>(bytes.size())};
  return testing::HostTensor(bytes.data(), shape, dtypes::kUInt8);
}

// One client process: connects, says "ready", waits for "go", cycles for opt.seconds, writes
// each cycle's nanoseconds to opt.samples and prints "done <cycles> <elapsed ns>".
int RunChild(const Options& opt) {
  ConnectOptions connect;
  connect.socket_path = opt.socket;
  connect.fast_reads = opt.child != "get-call";
  auto client = Client::Connect(connect);
  if (!client.ok()) Die("child: " + client.status().ToString());
  std::vector<uint8_t> bytes(opt.size, static_cast<uint8_t>(opt.id));
  std::vector<int64_t> shape;
  const DLTensor source = HostBytes(bytes, shape);
  const std::string own_name = absl::StrCat("load/put/", opt.id);
  std::vector<int64_t> samples;
  samples.reserve(1 << 20);
  std::printf("ready\n");
  std::fflush(stdout);
  char line[16];
  if (std::fgets(line, sizeof line, stdin) == nullptr) return 1;
  const auto start = Clock::now();
  const auto end = start + std::chrono::seconds(opt.seconds);
  auto now = start;
  while (now < end) {
    if (opt.child == "get" || opt.child == "get-call") {
      auto got = (*client)->Get("load/get");
      if (!got.ok()) Die("child: Get: " + got.status().ToString());
      (*got)->deleter(*got);
    } else {
      auto put = (*client)->Put(own_name, source);
      if (!put.ok()) Die("child: Put: " + put.status().ToString());
      if (absl::Status deleted = (*client)->Delete(own_name); !deleted.ok()) {
        Die("child: Delete: " + deleted.ToString());
      }
    }
    const auto after = Clock::now();
    samples.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(after - now).count());
    now = after;
  }
  // The releases of the last cycles are on their way: one round trip takes them.
  if (absl::Status ping = (*client)->Ping(); !ping.ok()) Die("child: Ping: " + ping.ToString());
  const int64_t elapsed =
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
  std::ofstream out(opt.samples, std::ios::binary);
  out.write(reinterpret_cast<const char*>(samples.data()),
            static_cast<std::streamsize>(samples.size() * sizeof(int64_t)));
  if (!out) Die("child: cannot write " + opt.samples);
  out.close();
  std::printf("done %zu %lld\n", samples.size(), static_cast<long long>(elapsed));
  std::fflush(stdout);
  return 0;
}

struct Round {
  size_t cycles = 0;
  double p50_ns = 0, p99_ns = 0, rate = 0, daemon_cpu_ns_per_cycle = 0;
  ProcessFootprint before, after;
};

// `clients` processes cycling `workload` at once against the daemon `daemon_pid`.
Round RunRound(const Options& opt, const std::string& self, const std::string& workload,
               int clients, const std::string& socket, pid_t daemon_pid,
               const std::string& scratch) {
  Round round;
  round.before = FootprintOf(daemon_pid);
  std::vector<Subprocess> children;
  SubprocessOptions options;  // a line protocol on stdin and stdout
  options.pipe_stdin = true;
  options.capture_stdout = true;
  for (int i = 0; i < clients; ++i) {
    auto child = Subprocess::Spawn(
        {self, "--child", workload, "--socket", socket, "--id", std::to_string(i), "--seconds",
         std::to_string(opt.seconds), "--size", std::to_string(opt.size), "--samples",
         absl::StrCat(scratch, "/samples-", i)},
        options);
    if (!child.ok()) Die(child.status().ToString());
    children.push_back(*std::move(child));
  }
  for (Subprocess& c : children) {
    if (c.ReadLine().value_or("") != "ready") Die("a client process did not start");
  }
  const int64_t cpu_before = CpuTimeNs(daemon_pid);
  for (Subprocess& c : children) {
    if (!c.WriteLine("go").ok()) Die("a client process failed");
  }
  int64_t longest_ns = 0;
  for (Subprocess& c : children) {
    std::vector<std::string> done = absl::StrSplit(c.ReadLine().value_or(""), ' ');
    int64_t cycles = 0, elapsed = 0;
    if (done.size() != 3 || done[0] != "done" || !absl::SimpleAtoi(done[1], &cycles) ||
        !absl::SimpleAtoi(done[2], &elapsed)) {
      Die("a client process failed");
    }
    round.cycles += static_cast<size_t>(cycles);
    longest_ns = std::max(longest_ns, elapsed);
  }
  const int64_t cpu_after = CpuTimeNs(daemon_pid);
  for (Subprocess& c : children) {
    c.CloseStdin();
    const int status = c.Wait().value_or(0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) Die("a client process failed");
  }
  std::vector<int64_t> all;
  all.reserve(round.cycles);
  for (int i = 0; i < clients; ++i) {
    const std::string path = absl::StrCat(scratch, "/samples-", i);
    std::ifstream in(path, std::ios::binary);
    std::vector<int64_t> samples(std::filesystem::file_size(path) / sizeof(int64_t));
    in.read(reinterpret_cast<char*>(samples.data()),
            static_cast<std::streamsize>(samples.size() * sizeof(int64_t)));
    all.insert(all.end(), samples.begin(), samples.end());
  }
  std::sort(all.begin(), all.end());
  round.p50_ns = Percentile(all, 0.50);
  round.p99_ns = Percentile(all, 0.99);
  round.rate = static_cast<double>(round.cycles) / (static_cast<double>(longest_ns) / 1e9);
  round.daemon_cpu_ns_per_cycle =
      static_cast<double>(cpu_after - cpu_before) / static_cast<double>(round.cycles);
  // Dead clients' connections close on the daemon's own time.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  round.after = FootprintOf(daemon_pid);
  return round;
}

int RunParent(const Options& opt, const std::string& self) {
  auto daemon = testing::DaemonProcess::Start({"--capacity", "1G", "--log-level", "warning"});
  if (!daemon.ok()) Die(daemon.status().ToString());
  ConnectOptions connect;
  connect.socket_path = daemon->socket_path();
  auto client = Client::Connect(connect);
  if (!client.ok()) Die(client.status().ToString());
  std::vector<uint8_t> bytes(opt.size, 1);
  std::vector<int64_t> shape;
  if (auto put = (*client)->Put("load/get", HostBytes(bytes, shape)); !put.ok()) {
    Die(put.status().ToString());
  }
  const std::string scratch =
      std::filesystem::temp_directory_path() / absl::StrCat("tensorbroker-load-", ::getpid());
  std::filesystem::create_directories(scratch);

  std::printf(
      "tensorbroker_load_bench: %u CPUs, %d s per round, %s tensors; each client is "
      "a process of its own\n\n",
      std::thread::hardware_concurrency(), opt.seconds, FormatSize(opt.size).c_str());
  std::printf("%-26s %7s %10s %10s %14s %16s\n", "workload", "clients", "p50", "p99", "cycles/s",
              "daemon CPU/cycle");
  std::vector<std::string> footprints;
  for (const std::string workload : {"get", "get-call", "put"}) {
    const std::string label = workload == "get"        ? "get/release"
                              : workload == "get-call" ? "get/release (round trip)"
                                                       : "put/delete";
    ProcessFootprint first{}, last{};
    for (size_t k = 0; k < opt.clients.size(); ++k) {
      const Round r = RunRound(opt, self, workload, opt.clients[k], daemon->socket_path(),
                               daemon->pid(), scratch);
      if (k == 0) first = r.before;
      last = r.after;
      std::printf("%-26s %7d %10s %10s %14.0f %16s\n", label.c_str(), opt.clients[k],
                  FormatNs(r.p50_ns).c_str(), FormatNs(r.p99_ns).c_str(), r.rate,
                  FormatNs(r.daemon_cpu_ns_per_cycle).c_str());
      std::fflush(stdout);
    }
    footprints.push_back(absl::StrCat("daemon around ", label, ": before ", Describe(first),
                                      "; after ", Describe(last)));
  }
  std::printf("\n");
  for (const std::string& line : footprints) std::printf("%s\n", line.c_str());
  auto stats = (*client)->Stats();
  if (stats.ok()) {
    std::printf("daemon at the end: %llu tensors, %llu leases, %llu pending, %llu bytes used\n",
                static_cast<unsigned long long>(stats->tensors),
                static_cast<unsigned long long>(stats->leases),
                static_cast<unsigned long long>(stats->pending),
                static_cast<unsigned long long>(stats->used_bytes));
  }
  std::filesystem::remove_all(scratch);
  return 0;
}

}  // namespace
}  // namespace tensorbroker::bench

int main(int argc, char** argv) {
  const tensorbroker::bench::Options opt = tensorbroker::bench::Parse(argc, argv);
  if (!opt.child.empty()) return tensorbroker::bench::RunChild(opt);
  return tensorbroker::bench::RunParent(opt, "/proc/self/exe");
}
