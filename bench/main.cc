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
// This file runs the sections in order and prints the header and the footer; the pieces live
// in bench_options, own_daemon, buffers, measurements, first_read, report and output.
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
#include <string>
#include <thread>
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

bool PinToCpu(pid_t pid, int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(pid, sizeof set, &set) == 0;
}

int Run(int argc, char** argv) {
  Options opt;
  if (!ParseArgs(argc, argv, &opt)) return 2;
  if (!opt.child_read.empty()) return ChildRead(opt);
  if (!opt.child_cycles.empty()) return ChildCycles(opt);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  // Pin before any thread exists, so every gRPC thread (and the consumer children) inherit it.
  std::string pin_mode;
  if (opt.pin_cpu >= 0) {
    if (!PinToCpu(0, opt.pin_cpu)) {
      std::fprintf(stderr, "--pin-cpu %d: sched_setaffinity: %s\n", opt.pin_cpu, strerror(errno));
      return 2;
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

  OwnDaemon own;
  std::string socket = opt.socket;
  std::string daemon_desc;
  if (socket.empty()) {
    if (absl::Status s = own.Start(opt.daemon, opt.capacity, opt.pin_daemon_cpu); !s.ok()) {
      std::fprintf(stderr, "tensorbroker_bench: cannot start %s: %s\n", opt.daemon.c_str(),
                   s.ToString().c_str());
      return 1;
    }
    socket = own.socket();
    daemon_desc = opt.daemon + " --socket " + socket + " --capacity " + opt.capacity + " (pid " +
                  std::to_string(own.pid()) + ", started by the bench)";
  } else {
    daemon_desc = "external, on " + socket;
  }

  std::string thp;
  {
    std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
    std::getline(in, thp);
  }
  std::printf("tensorbroker_bench\n");
  std::printf("  daemon:      %s\n", daemon_desc.c_str());
  std::printf("  cpus:        %u online; pinning: %s\n", std::thread::hardware_concurrency(),
              pin_mode.c_str());
  std::printf("  small ops:   %d iterations after %d warm-up; tensor %s\n", opt.iterations,
              opt.warmup, FormatSize(opt.size_small).c_str());
  std::printf("  large ops:   %d iterations after %d warm-up; tensor %s; gRPC chunk %s\n",
              opt.large_iterations, opt.large_warmup, FormatSize(opt.size_large).c_str(),
              FormatSize(opt.chunk).c_str());
  std::printf("  THP:         %s\n", thp.empty() ? "(unknown)" : thp.c_str());
  std::printf("  clock:       std::chrono::steady_clock; figures are per operation\n\n");

  Report rep;
  int rc = 0;
  std::string stats_after;
  {
    auto client_or = Client::Connect(socket);
    if (!client_or.ok()) {
      std::fprintf(stderr, "tensorbroker_bench: Connect(%s): %s\n", socket.c_str(),
                   client_or.status().ToString().c_str());
      return 1;
    }
    Client& client = **client_or;

    // Local buffers: the source of every large tensor (written, so faulted in) and a
    // destination for the gRPC Read (faulted in too).
    const uint64_t n = opt.size_large;
    Buffer src = AllocBuffer(n), dst = AllocBuffer(n), small = AllocBuffer(opt.size_small);
    if (!src || !dst || !small) {
      std::fprintf(stderr, "tensorbroker_bench: cannot allocate local buffers\n");
      return 1;
    }
    FillPattern(src.get(), n);
    std::memset(dst.get(), 0xA5, n);
    FillPattern(small.get(), opt.size_small);
    const uint64_t expected_sum = SumWords(src.get(), n);

    const std::string small_name = "bench/get/small";
    const std::string large_name = "bench/get/large";

    rep.Section("0. the floor");
    if (absl::Status s = BenchRawRoundTrip(opt, rep); !s.ok()) rep.Fail("raw round trip", s);

    rep.Section("1. baseline");
    if (absl::Status s = BenchPing(client, opt, rep); !s.ok()) rep.Fail("Ping", s);

    rep.Section("2. Get / release of a sealed tensor");
    if (absl::Status s =
            BenchGetRelease(client, opt, small_name, opt.size_small, small.get(), "small", rep);
        !s.ok()) {
      rep.Fail("Get/release " + FormatSize(opt.size_small), s);
    }
    bool large_published = false;
    if (absl::Status s = BenchGetRelease(client, opt, large_name, n, src.get(), "large", rep);
        !s.ok()) {
      rep.Fail("Get/release " + FormatSize(n), s);
    } else {
      large_published = true;
    }

    if (!opt.python_bench.empty()) {
      rep.Section("2b. Python, against the same daemon");
      if (absl::Status s = BenchPython(opt, socket, rep); !s.ok()) rep.Fail("Python", s);
    }
    rep.Section("2c. consumer processes cycling Get/release (" + FormatSize(opt.size_small) +
                ") at once");
    if (absl::Status s = BenchConsumers(opt, SelfPath(argv[0]), socket, small_name,
                                        opt.socket.empty() ? own.pid() : 0, rep);
        !s.ok()) {
      rep.Fail("consumers", s);
    }

    rep.Section("3. moving " + FormatSize(n) + " into (and out of) the broker");
    {
      grpc::ChannelArguments args;
      args.SetMaxReceiveMessageSize(-1);
      args.SetMaxSendMessageSize(-1);
      auto channel =
          grpc::CreateCustomChannel("unix:" + socket, grpc::InsecureChannelCredentials(), args);
      if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(5))) {
        rep.Fail("raw gRPC channel", absl::UnavailableError("cannot connect to " + socket));
      } else {
        auto stub = v1::Broker::NewStub(channel);
        if (absl::Status s = BenchMoveLarge(client, *stub, opt, src.get(), dst.get(), rep);
            !s.ok()) {
          rep.Fail("moving " + FormatSize(n), s);
        }
      }
    }
    dst.reset();  // give the memory back before section 4 maps more

    rep.Section("4. first full read of " + FormatSize(n) + " (sum of uint64 words)");
    if (!large_published) {
      // Section 2 failed for the large tensor; try publishing it just for this.
      if (absl::Status s = Publish(client, large_name, src.get(), n); s.ok()) {
        large_published = true;
      } else {
        rep.Fail("publish " + large_name, s);
      }
    }
    if (large_published) {
      if (absl::Status s = BenchFirstRead(opt, SelfPath(argv[0]), socket, large_name, src.get(),
                                          expected_sum, rep);
          !s.ok()) {
        rep.Fail("first read", s);
      }
    }
    DeleteQuietly(client, small_name);
    DeleteQuietly(client, large_name);
    // Everything was released and deleted: the broker should be back to empty.
    if (auto st = client.Stats(); st.ok()) {
      char buf[320];
      std::snprintf(buf, sizeof buf,
                    "used %" PRIu64 " B, reserved %" PRIu64 " B, tensors %" PRIu64
                    ", leases %" PRIu64 ", pending %" PRIu64 ", segments %" PRIu64
                    ", clients %" PRIu64,
                    st->used_bytes, st->reserved_bytes, st->tensors, st->leases, st->pending,
                    st->segments, st->clients);
      stats_after = buf;
      if (opt.socket.empty() &&
          (st->used_bytes != 0 || st->tensors != 0 || st->leases != 0 || st->pending != 0)) {
        rep.failures.push_back("broker not empty after the run (leak?): " + stats_after);
      }
    } else {
      rep.Fail("Stats", st.status());
    }
  }  // the client disconnects here

  std::string stop_desc;
  if (opt.socket.empty()) {
    stop_desc = own.Stop();
    if (!own.clean_exit()) {
      rep.failures.push_back("daemon shutdown: " + stop_desc);
      std::fprintf(stderr, "tensorbroker_bench: daemon %s; log tail:\n%s", stop_desc.c_str(),
                   own.LogTail().c_str());
    }
  }

  PrintTable(rep);
  PrintFigures(rep);
  const std::vector<Ratio> ratios = ComputeRatios(rep, opt.size_small, opt.size_large);
  PrintRatios(ratios);
  if (!stats_after.empty()) std::printf("\nbroker after the run: %s\n", stats_after.c_str());
  if (opt.socket.empty()) std::printf("daemon: %s\n", stop_desc.c_str());
  if (!rep.failures.empty()) {
    rc = 1;
    std::printf("\nERRORS (figures above are incomplete):\n");
    for (const std::string& f : rep.failures) std::printf("  - %s\n", f.c_str());
  }

  if (opt.json) std::printf("\n%s\n", ToJson(opt, pin_mode, rep, ratios).c_str());
  return rc;
}

}  // namespace
}  // namespace tensorbroker::bench

int main(int argc, char** argv) { return tensorbroker::bench::Run(argc, argv); }
