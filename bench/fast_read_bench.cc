// tensorbroker_fast_read_bench: reads without a round trip (issue 34), as figures (no pass/fail),
// side by side in one run against its own tensorbrokerd:
//   floor        a C read of a seqlocked record in a shared mapping (sequence, 8 words, sequence)
//   check        LatestVersion from the directory, and the same asked of the daemon (Stat)
//   get          Get of the current version + a DLPack view of it + its deleter, from the
//                directory and with a round trip (ConnectOptions::fast_reads = false), and the
//                daemon's CPU time per get of each
//   first get    a Get of a tensor in a segment this process does not map yet (one round trip,
//                which maps it)
// Each figure is the median of --rounds rounds of --iterations operations (ns per operation).
//
// Usage: tensorbroker_fast_read_bench [--iterations 200000] [--rounds 5]
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bench/report.h"
#include "tensorbroker/client.h"
#include "tests/support/daemon_process.h"
#include "tests/support/host_tensor.h"
#include "tests/support/process_footprint.h"

namespace tensorbroker::bench {
namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "tensorbroker_fast_read_bench: %s\n", what.c_str());
  std::exit(1);
}

template <typename T>
T OrDie(absl::StatusOr<T> value, const char* what) {
  if (!value.ok()) Die(absl::StrCat(what, ": ", value.status().ToString()));
  return *std::move(value);
}

// Nanoseconds per call of `op`, the median of `rounds` rounds of `iterations` calls.
double NsPerOp(int rounds, int iterations, const std::function<void()>& op) {
  std::vector<double> per_round;
  for (int r = 0; r < rounds; ++r) {
    const auto start = Clock::now();
    for (int i = 0; i < iterations; ++i) op();
    const double ns =
        std::chrono::duration<double, std::nano>(Clock::now() - start).count() / iterations;
    per_round.push_back(ns);
  }
  std::sort(per_round.begin(), per_round.end());
  return per_round[per_round.size() / 2];
}

// The floor: one writer's seqlocked record of 8 words in a shared mapping, read in C.
double SeqlockFloorNs(int rounds, int iterations) {
  void* page = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) Die("mmap");
  auto* words = static_cast<uint64_t*>(page);
  for (int w = 1; w <= 8; ++w) words[w] = static_cast<uint64_t>(w);
  uint64_t sink = 0;
  const double ns = NsPerOp(rounds, iterations, [&] {
    uint64_t seq, sum;
    do {
      seq = __atomic_load_n(&words[0], __ATOMIC_ACQUIRE);
      sum = 0;
      for (int w = 1; w <= 8; ++w) sum += __atomic_load_n(&words[w], __ATOMIC_ACQUIRE);
    } while (seq % 2 == 1 || __atomic_load_n(&words[0], __ATOMIC_ACQUIRE) != seq);
    sink += sum;
  });
  ::munmap(page, 4096);
  if (sink == 1) std::printf(" ");  // keeps the reads
  return ns;
}

std::unique_ptr<Client> ConnectOrDie(const std::string& socket, bool fast_reads) {
  ConnectOptions options;
  options.socket_path = socket;
  options.fast_reads = fast_reads;
  return OrDie(Client::Connect(options), "connect");
}

// Get + a DLPack view (the first element read) + the deleter.
void GetViewRelease(Client& client, const std::string& name) {
  auto got = client.Get(name);
  if (!got.ok()) Die(got.status().ToString());
  const DLTensor& view = (*got)->dl_tensor;
  if (static_cast<const uint8_t*>(view.data)[0] != 1) Die("wrong bytes");
  (*got)->deleter(*got);
}

struct GetFigures {
  double ns = 0;
  double daemon_cpu_ns = 0;
};

GetFigures MeasureGets(Client& client, pid_t daemon, int rounds, int iterations) {
  GetViewRelease(client, "bench/x");  // maps the segment
  (void)client.Ping();
  const int64_t cpu_before = testing::CpuTimeNs(daemon);
  GetFigures figures;
  figures.ns = NsPerOp(rounds, iterations, [&] { GetViewRelease(client, "bench/x"); });
  (void)client.Ping();  // the releases queued by the round-trip gets arrive
  figures.daemon_cpu_ns = static_cast<double>(testing::CpuTimeNs(daemon) - cpu_before) /
                          (static_cast<double>(rounds) * iterations);
  return figures;
}

int Run(int iterations, int rounds) {
  auto daemon = OrDie(testing::DaemonProcess::Start({"--log-level", "warning"}), "daemon");
  const std::string& socket = daemon.socket_path();
  std::unique_ptr<Client> fast = ConnectOrDie(socket, true);
  std::unique_ptr<Client> asking = ConnectOrDie(socket, false);
  std::vector<uint8_t> bytes(4096, 1);
  std::vector<int64_t> shape = {4096};
  OrDie(fast->Put("bench/x", testing::HostTensor(bytes.data(), shape, dtypes::kUInt8)), "put");
  const int slow = std::max(1, iterations / 50);  // round trips take ~50x longer

  std::printf("tensorbroker_fast_read_bench: %u CPUs; median of %d rounds; ns per operation\n\n",
              std::thread::hardware_concurrency(), rounds);
  const double floor = SeqlockFloorNs(rounds, iterations);
  uint64_t sink = 0;
  const double check = NsPerOp(
      rounds, iterations, [&] { sink += OrDie(fast->LatestVersion("bench/x"), "LatestVersion"); });
  const double check_call = NsPerOp(
      rounds, slow, [&] { sink += OrDie(asking->LatestVersion("bench/x"), "LatestVersion"); });
  std::printf("%-52s %12s\n", "C seqlock read of a shared record (the floor)",
              FormatNs(floor).c_str());
  std::printf("%-52s %12s  (%.1fx the floor)\n", "LatestVersion, from the directory",
              FormatNs(check).c_str(), check / floor);
  std::printf("%-52s %12s  (%.0fx)\n", "LatestVersion, asked of the daemon (Stat)",
              FormatNs(check_call).c_str(), check_call / check);

  const GetFigures get = MeasureGets(*fast, daemon.pid(), rounds, iterations);
  const GetFigures get_call = MeasureGets(*asking, daemon.pid(), rounds, slow);
  std::printf("%-52s %12s  daemon CPU/get %s\n", "get + DLPack view + release, from the directory",
              FormatNs(get.ns).c_str(), FormatNs(get.daemon_cpu_ns).c_str());
  std::printf("%-52s %12s  daemon CPU/get %s  (%.0fx)\n",
              "get + DLPack view + release, with a round trip", FormatNs(get_call.ns).c_str(),
              FormatNs(get_call.daemon_cpu_ns).c_str(), get_call.ns / get.ns);

  // A name in a segment this process does not map yet (other readers: a segment of its own):
  // one round trip, which maps it.
  std::vector<double> firsts;
  for (int r = 0; r < rounds; ++r) {
    const std::string name = absl::StrCat("bench/first", r);
    PutOptions own_segment;
    own_segment.readers = {absl::StrCat("uid:", 100000 + r)};
    OrDie(fast->Put(name, testing::HostTensor(bytes.data(), shape, dtypes::kUInt8), own_segment),
          "put");
    const auto start = Clock::now();
    GetViewRelease(*fast, name);
    firsts.push_back(std::chrono::duration<double, std::nano>(Clock::now() - start).count());
  }
  std::sort(firsts.begin(), firsts.end());
  std::printf("%-52s %12s\n", "get of a segment not mapped yet (one round trip)",
              FormatNs(firsts[firsts.size() / 2]).c_str());
  if (sink == 1) std::printf(" ");
  return 0;
}

}  // namespace
}  // namespace tensorbroker::bench

int main(int argc, char** argv) {
  int iterations = 200000, rounds = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    int* target = flag == "--iterations" ? &iterations : flag == "--rounds" ? &rounds : nullptr;
    if (target == nullptr || !absl::SimpleAtoi(argv[i + 1], target) || *target < 1) {
      std::fprintf(stderr, "usage: tensorbroker_fast_read_bench [--iterations N] [--rounds N]\n");
      return 2;
    }
  }
  if (argc % 2 == 0) {
    std::fprintf(stderr, "usage: tensorbroker_fast_read_bench [--iterations N] [--rounds N]\n");
    return 2;
  }
  return tensorbroker::bench::Run(iterations, rounds);
}
