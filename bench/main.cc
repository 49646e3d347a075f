// tensorbroker_bench: latency and throughput figures for tensorbrokerd and the client library.
//
// Prints figures only (no pass/fail); the "targets" block says whether the design goals are met
// on this machine, for information. Everything runs against ONE daemon: started here on a
// temporary socket (`--capacity 6G`) unless --socket names a running one. See bench/README.md.
//
//   0. the floor: a raw Unix-socket round trip between two processes (C++)
//   1. empty gRPC round trip (Client::Ping): the old baseline
//   2. Get and release (the tensor's deleter) of a sealed 4 KiB and a sealed 1 GiB tensor,
//      over the local channel
//   2b. Python (bench/python_bench.py against the same daemon): its own raw round trip,
//      shared_memory attach by name, get + two DLPack views + release, one extra view, release()
//   2c. 1, 2 and 4 consumer processes cycling Get/release at once: aggregate cycles per second
//      and the daemon's CPU time per cycle
//   3. moving 1 GiB: (a) Put through the gRPC bytes path (raw stub, client-streamed chunks),
//      (a2) Read the same bytes back out over gRPC, versus (b) zero-copy:
//      Create + memcpy into the shared pages + Seal + Get + release (client library)
//   4. a fresh consumer process's first full read of a 1 GiB tensor after Get, versus reading
//      a local buffer already written, and a fresh malloc'd buffer touched for the first time
//
// This file runs the sections in order, one function each, and prints the header and the
// footer; the pieces live in bench_options, own_daemon, buffers, measurements, first_read,
// report and output. Single-threaded (the measurements start their own threads and processes).
#include <errno.h>
#include <grpcpp/grpcpp.h>
#include <sched.h>
#include <string.h>

#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "bench/bench_options.h"
#include "bench/buffers.h"
#include "bench/first_read.h"
#include "bench/local_path.h"
#include "bench/measurements.h"
#include "bench/output.h"
#include "bench/own_daemon.h"
#include "bench/report.h"
#include "tensorbroker/client.h"
#include "tensorbroker/v1/broker.grpc.pb.h"

namespace tensorbroker::bench {
namespace {

constexpr char kSmallName[] = "bench/get/small";
constexpr char kLargeName[] = "bench/get/large";

bool PinToCpu(pid_t pid, int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(pid, sizeof set, &set) == 0;
}

// Pins before any thread exists, so every gRPC thread (and the consumer children) inherit it.
// The "pinning" line of the header; nothing (after saying why) when pinning fails.
std::optional<std::string> PinAndDescribe(const Options& opt) {
  std::string pin_mode;
  if (opt.pin_cpu >= 0) {
    if (!PinToCpu(0, opt.pin_cpu)) {
      std::fprintf(stderr, "--pin-cpu %d: sched_setaffinity: %s\n", opt.pin_cpu, strerror(errno));
      return std::nullopt;
    }
    pin_mode = "bench (and its consumer children) on CPU " + std::to_string(opt.pin_cpu);
  } else {
    pin_mode = "bench floats";
  }
  if (!opt.socket.empty()) {
    pin_mode += ", daemon external (not pinned by the bench)";
  } else if (opt.pin_daemon_cpu >= 0) {
    pin_mode += ", daemon on CPU " + std::to_string(opt.pin_daemon_cpu);
  } else {
    pin_mode += ", daemon floats";
  }
  if (opt.pin_cpu < 0 && (opt.pin_daemon_cpu < 0 || !opt.socket.empty())) {
    pin_mode = "none (" + pin_mode + ")";
  }
  return pin_mode;
}

// The daemon measured: --socket's, or `own` started here.
struct Target {
  std::string socket;
  std::string description;
};
std::optional<Target> FindOrStartDaemon(const Options& opt, OwnDaemon* own) {
  if (!opt.socket.empty()) return Target{opt.socket, "external, on " + opt.socket};
  if (absl::Status s = own->Start(opt.daemon, opt.capacity, opt.pin_daemon_cpu); !s.ok()) {
    std::fprintf(stderr, "tensorbroker_bench: cannot start %s: %s\n", opt.daemon.c_str(),
                 s.ToString().c_str());
    return std::nullopt;
  }
  return Target{own->socket(), opt.daemon + " --socket " + own->socket() + " --capacity " +
                                   opt.capacity + " (pid " + std::to_string(own->pid()) +
                                   ", started by the bench)"};
}

void PrintHeader(const Options& opt, const Target& target, const std::string& pin_mode) {
  std::string thp;
  {
    std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
    std::getline(in, thp);
  }
  std::printf("tensorbroker_bench\n");
  std::printf("  daemon:      %s\n", target.description.c_str());
  std::printf("  cpus:        %u online; pinning: %s\n", std::thread::hardware_concurrency(),
              pin_mode.c_str());
  std::printf("  small ops:   %d iterations after %d warm-up; tensor %s\n", opt.iterations,
              opt.warmup, FormatSize(opt.size_small).c_str());
  std::printf("  large ops:   %d iterations after %d warm-up; tensor %s; gRPC chunk %s\n",
              opt.large_iterations, opt.large_warmup, FormatSize(opt.size_large).c_str(),
              FormatSize(opt.chunk).c_str());
  std::printf("  THP:         %s\n", thp.empty() ? "(unknown)" : thp.c_str());
  std::printf("  clock:       std::chrono::steady_clock; figures are per operation\n\n");
}

// What every section works with.
struct Run {
  Run(const Options& opt, Client& client, const std::string& socket, std::string self,
      pid_t daemon_pid, Report& rep)
      : opt(opt),
        client(client),
        socket(socket),
        self(std::move(self)),
        daemon_pid(daemon_pid),
        rep(rep) {}

  const Options& opt;
  Client& client;
  const std::string& socket;
  const std::string self;  // this binary, for the consumer children
  const pid_t daemon_pid;  // 0 for an external daemon
  Report& rep;
  // Local buffers: the source of every large tensor (written, so faulted in) and a
  // destination for the gRPC Read (faulted in too).
  Buffer src, dst, small;
  uint64_t expected_sum = 0;
  bool large_published = false;
};

// Sections 0 and 1: the raw round trip and Ping.
void RunFloorAndBaseline(Run& run) {
  run.rep.Section("0. the floor");
  if (absl::Status s = BenchRawRoundTrip(run.opt, run.rep); !s.ok()) {
    run.rep.Fail("raw round trip", s);
  }
  run.rep.Section("1. baseline");
  if (absl::Status s = BenchPing(run.client, run.opt, run.rep); !s.ok()) run.rep.Fail("Ping", s);
}

// Section 2: Get / release of the small and the large tensor (publishing both).
void RunGetRelease(Run& run) {
  const Options& opt = run.opt;
  run.rep.Section("2. Get / release of a sealed tensor");
  if (absl::Status s = BenchGetRelease(run.client, opt, kSmallName, opt.size_small, run.small.get(),
                                       "small", run.rep);
      !s.ok()) {
    run.rep.Fail("Get/release " + FormatSize(opt.size_small), s);
  }
  if (absl::Status s = BenchGetRelease(run.client, opt, kLargeName, opt.size_large, run.src.get(),
                                       "large", run.rep);
      !s.ok()) {
    run.rep.Fail("Get/release " + FormatSize(opt.size_large), s);
  } else {
    run.large_published = true;
  }
}

// Sections 2b (with --python-bench) and 2c.
void RunPythonAndConsumers(Run& run) {
  const Options& opt = run.opt;
  if (!opt.python_bench.empty()) {
    run.rep.Section("2b. Python, against the same daemon");
    if (absl::Status s = BenchPython(opt, run.socket, run.rep); !s.ok()) run.rep.Fail("Python", s);
  }
  run.rep.Section("2c. consumer processes cycling Get/release (" + FormatSize(opt.size_small) +
                  ") at once");
  if (absl::Status s =
          BenchConsumers(opt, run.self, run.socket, kSmallName, run.daemon_pid, run.rep);
      !s.ok()) {
    run.rep.Fail("consumers", s);
  }
}

// Section 3: the gRPC bytes path against zero-copy.
void RunMoveLarge(Run& run) {
  const uint64_t n = run.opt.size_large;
  run.rep.Section("3. moving " + FormatSize(n) + " into (and out of) the broker");
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  auto channel =
      grpc::CreateCustomChannel("unix:" + run.socket, grpc::InsecureChannelCredentials(), args);
  if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(5))) {
    run.rep.Fail("raw gRPC channel", absl::UnavailableError("cannot connect to " + run.socket));
    return;
  }
  auto stub = v1::Broker::NewStub(channel);
  if (absl::Status s =
          BenchMoveLarge(run.client, *stub, run.opt, run.src.get(), run.dst.get(), run.rep);
      !s.ok()) {
    run.rep.Fail("moving " + FormatSize(n), s);
  }
}

// Section 4: a fresh process's first read of the large tensor.
void RunFirstRead(Run& run) {
  const uint64_t n = run.opt.size_large;
  run.rep.Section("4. first full read of " + FormatSize(n) + " (sum of uint64 words)");
  if (!run.large_published) {
    // Section 2 failed for the large tensor; try publishing it just for this.
    if (absl::Status s = Publish(run.client, kLargeName, run.src.get(), n); s.ok()) {
      run.large_published = true;
    } else {
      run.rep.Fail(std::string("publish ") + kLargeName, s);
    }
  }
  if (!run.large_published) return;
  if (absl::Status s = BenchFirstRead(run.opt, run.self, run.socket, kLargeName, run.src.get(),
                                      run.expected_sum, run.rep);
      !s.ok()) {
    run.rep.Fail("first read", s);
  }
}

// Deletes what the sections published; the broker's figures after that (empty, for a daemon of
// the bench's own, or a failure is recorded).
std::string CleanUpAndCheckEmpty(Run& run) {
  DeleteQuietly(run.client, kSmallName);
  DeleteQuietly(run.client, kLargeName);
  auto st = run.client.Stats();
  if (!st.ok()) {
    run.rep.Fail("Stats", st.status());
    return "";
  }
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "used %" PRIu64 " B, reserved %" PRIu64 " B, tensors %" PRIu64 ", leases %" PRIu64
                ", pending %" PRIu64 ", segments %" PRIu64 ", clients %" PRIu64,
                st->used_bytes, st->reserved_bytes, st->tensors, st->leases, st->pending,
                st->segments, st->clients);
  const std::string stats_after = buf;
  if (run.opt.socket.empty() &&
      (st->used_bytes != 0 || st->tensors != 0 || st->leases != 0 || st->pending != 0)) {
    run.rep.failures.push_back("broker not empty after the run (leak?): " + stats_after);
  }
  return stats_after;
}

// Connects and runs every section; false (after saying why) when it cannot start them.
// `stats_after`: the broker's figures once everything was released and deleted.
bool RunSections(const Options& opt, const std::string& socket, const std::string& self,
                 pid_t daemon_pid, Report& rep, std::string* stats_after) {
  // The round-trip path, which these sections measure (reads without one:
  // tensorbroker_fast_read_bench).
  ConnectOptions connect;
  connect.socket_path = socket;
  connect.fast_reads = false;
  auto client_or = Client::Connect(connect);
  if (!client_or.ok()) {
    std::fprintf(stderr, "tensorbroker_bench: Connect(%s): %s\n", socket.c_str(),
                 client_or.status().ToString().c_str());
    return false;
  }
  Run run(opt, **client_or, socket, self, daemon_pid, rep);
  const uint64_t n = opt.size_large;
  run.src = AllocBuffer(n);
  run.dst = AllocBuffer(n);
  run.small = AllocBuffer(opt.size_small);
  if (!run.src || !run.dst || !run.small) {
    std::fprintf(stderr, "tensorbroker_bench: cannot allocate local buffers\n");
    return false;
  }
  FillPattern(run.src.get(), n);
  std::memset(run.dst.get(), 0xA5, n);
  FillPattern(run.small.get(), opt.size_small);
  run.expected_sum = SumWords(run.src.get(), n);

  RunFloorAndBaseline(run);
  RunGetRelease(run);
  RunPythonAndConsumers(run);
  RunMoveLarge(run);
  run.dst.reset();  // give the memory back before section 4 maps more
  RunFirstRead(run);
  *stats_after = CleanUpAndCheckEmpty(run);
  return true;
}  // the client disconnects here

// Stops a daemon of the bench's own ("" for an external one); an unclean exit is a failure.
std::string StopOwnDaemon(const Options& opt, OwnDaemon& own, Report& rep) {
  if (!opt.socket.empty()) return "";
  std::string stop_desc = own.Stop();
  if (!own.clean_exit()) {
    rep.failures.push_back("daemon shutdown: " + stop_desc);
    std::fprintf(stderr, "tensorbroker_bench: daemon %s; log tail:\n%s", stop_desc.c_str(),
                 own.LogTail().c_str());
  }
  return stop_desc;
}

// The table, figures, ratios, errors and (--json) the JSON; the exit status.
int PrintResults(const Options& opt, const std::string& pin_mode, const Report& rep,
                 const std::string& stats_after, const std::string& stop_desc) {
  PrintTable(rep);
  PrintFigures(rep);
  const std::vector<Ratio> ratios = ComputeRatios(rep, opt.size_small, opt.size_large);
  PrintRatios(ratios);
  if (!stats_after.empty()) std::printf("\nbroker after the run: %s\n", stats_after.c_str());
  if (opt.socket.empty()) std::printf("daemon: %s\n", stop_desc.c_str());
  int rc = 0;
  if (!rep.failures.empty()) {
    rc = 1;
    std::printf("\nERRORS (figures above are incomplete):\n");
    for (const std::string& f : rep.failures) std::printf("  - %s\n", f.c_str());
  }
  if (opt.json) std::printf("\n%s\n", ToJson(opt, pin_mode, rep, ratios).c_str());
  return rc;
}

int Main(int argc, char** argv) {
  Options opt;
  if (!ParseArgs(argc, argv, &opt)) return 2;
  if (!opt.child_read.empty()) return ChildRead(opt);
  if (!opt.child_cycles.empty()) return ChildCycles(opt);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::optional<std::string> pin_mode = PinAndDescribe(opt);
  if (!pin_mode.has_value()) return 2;
  OwnDaemon own;
  const std::optional<Target> target = FindOrStartDaemon(opt, &own);
  if (!target.has_value()) return 1;
  PrintHeader(opt, *target, *pin_mode);
  Report rep;
  std::string stats_after;
  if (!RunSections(opt, target->socket, SelfPath(argv[0]), opt.socket.empty() ? own.pid() : 0, rep,
                   &stats_after)) {
    return 1;
  }
  const std::string stop_desc = StopOwnDaemon(opt, own, rep);
  return PrintResults(opt, *pin_mode, rep, stats_after, stop_desc);
}

}  // namespace
}  // namespace tensorbroker::bench

int main(int argc, char** argv) { return tensorbroker::bench::Main(argc, argv); }
