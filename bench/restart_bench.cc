// tensorbroker_restart_bench: what a restart and a takeover cost, as figures (no pass/fail).
//   1. Start to serving after a restart under systemd's descriptor store (the test harness
//      plays systemd, tests/support/service_manager_harness.h), with 0 and with --tensors
//      adopted tensors, side by side: from the exec to READY=1, and to a client's first Get.
//   2. The takeover gap (tensorbrokerd --takeover, no systemd) as a client sees it: a consumer
//      cycles Get/release on its own Client throughout; its slowest Get during each takeover,
//      and how many of its calls failed.
// Usage: tensorbroker_restart_bench [--tensors N] [--rounds N]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/command_line.h"
#include "tensorbroker/client.h"
#include "tests/support/daemon_log.h"
#include "tests/support/daemon_process.h"
#include "tests/support/daemon_wait.h"
#include "tests/support/host_tensor.h"
#include "tests/support/service_manager_harness.h"

namespace {

using tensorbroker::Client;
using tensorbroker::TensorPtr;
using Clock = std::chrono::steady_clock;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "tensorbroker_restart_bench: %s\n", what.c_str());
  std::exit(1);
}

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

void PutMany(Client& client, int count) {
  std::vector<float> values(1024, 1.f);  // 4 KiB each
  std::vector<int64_t> shape = {1024};
  const DLTensor t =
      tensorbroker::testing::HostTensor(values.data(), shape, tensorbroker::dtypes::kFloat32);
  for (int i = 0; i < count; ++i) {
    if (auto put = client.Put(absl::StrCat("bench/", i), t); !put.ok()) {
      Die(put.status().ToString());
    }
  }
}

struct StartFigures {
  double ready_ms = 0;   // exec to READY=1
  double served_ms = 0;  // exec to a client's first Get answered
};

// Restarts a daemon holding `tensors` tensors `rounds` times under the harness.
std::vector<StartFigures> MeasureRestarts(int tensors, int rounds) {
  auto harness = tensorbroker::testing::ServiceManagerHarness::CreateInTemporaryDirectory();
  if (!harness.ok()) Die(harness.status().ToString());
  const std::string socket = (*harness)->directory() + "/broker.sock";
  const std::vector<std::string> argv = {tensorbroker::testing::DaemonBinaryPath(),
                                         "--socket",
                                         socket,
                                         "--capacity",
                                         "2G",
                                         "--log-level",
                                         "warning"};
  std::unique_ptr<tensorbroker::testing::DaemonLog> log;  // the running daemon's stderr
  // `populated`: the tensors are there to be adopted (not at the very first start).
  auto start = [&](bool populated) {
    auto new_log = tensorbroker::testing::DaemonLog::Create();
    if (!new_log.ok()) Die(new_log.status().ToString());
    log = *std::move(new_log);
    const Clock::time_point t0 = Clock::now();
    auto pid = (*harness)->Start(argv, {}, log->child_end());
    log->CloseChildEnd();
    if (!pid.ok()) Die(pid.status().ToString());
    // Polled every 5 ms: the figure's resolution. 60 s against a hang while adopting.
    bool exited = false;
    const absl::Status ready = tensorbroker::testing::WaitForDaemon(
        {[&] {
           std::optional<int> status = tensorbroker::testing::ReapIfExited(*pid);
           exited = status.has_value();
           return status;
         },
         [&] {
           if (exited) (void)log->WaitForEnd(absl::Seconds(5));  // its last words
           return log->Text();
         }},
        "ready (READY=1)",
        [&] {
          (*harness)->Drain();
          return (*harness)->ready() ? absl::OkStatus() : absl::UnavailableError("no READY=1");
        },
        absl::Seconds(60), absl::Milliseconds(5));
    if (!ready.ok()) Die(ready.ToString());
    StartFigures f;
    f.ready_ms = Ms(Clock::now() - t0);
    auto client = Client::Connect(socket);
    if (!client.ok()) Die(client.status().ToString());
    const std::string name = tensors > 0 ? absl::StrCat("bench/", tensors - 1) : "bench/none";
    auto got = (*client)->Get(name);
    if (populated && tensors > 0 && !got.ok()) {
      Die(absl::StrCat(name, ": ", got.status().ToString()));
    }
    if (got.ok()) TensorPtr release(*got);
    f.served_ms = Ms(Clock::now() - t0);
    return std::make_pair(*pid, f);
  };
  auto stop = [&](pid_t pid) {
    ::kill(pid, SIGTERM);
    ::waitpid(pid, nullptr, 0);
    (*harness)->Drain();
    (void)log->WaitForEnd(absl::Seconds(5));  // its last words shown before the next start
  };
  auto [pid, first] = start(false);
  {
    auto client = Client::Connect(socket);
    if (!client.ok()) Die(client.status().ToString());
    PutMany(**client, tensors);
  }
  std::vector<StartFigures> figures;
  for (int r = 0; r < rounds; ++r) {
    stop(pid);
    auto [next, f] = start(true);
    pid = next;
    figures.push_back(f);
  }
  stop(pid);
  return figures;
}

struct TakeoverFigures {
  std::vector<double> gap_ms;  // the slowest Get during each takeover
  int failed = 0;
  int cycles = 0;
};

TakeoverFigures MeasureTakeovers(int tensors, int rounds) {
  auto first =
      tensorbroker::testing::DaemonProcess::Start({"--capacity", "2G", "--log-level", "warning"});
  if (!first.ok()) Die(first.status().ToString());
  const std::string socket = first->socket_path();
  {
    auto client = Client::Connect(socket);
    if (!client.ok()) Die(client.status().ToString());
    PutMany(**client, tensors);
  }
  std::atomic<bool> stop{false};
  std::atomic<int64_t> slowest_us{0};
  std::atomic<int> failed{0}, cycles{0};
  std::thread consumer([&] {
    auto client = Client::Connect(socket);
    if (!client.ok()) Die(client.status().ToString());
    while (!stop.load()) {
      const Clock::time_point t0 = Clock::now();
      auto got = (*client)->Get("bench/0");
      const int64_t us =
          std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count();
      for (int64_t seen = slowest_us.load();
           us > seen && !slowest_us.compare_exchange_weak(seen, us);) {
      }
      if (!got.ok()) {
        ++failed;
        continue;
      }
      TensorPtr release(*got);
      ++cycles;
    }
  });
  TakeoverFigures figures;
  tensorbroker::testing::DaemonProcess owner = *std::move(first);  // owns the directory
  std::vector<tensorbroker::testing::DaemonProcess> successors;
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (int r = 0; r < rounds; ++r) {
    slowest_us = 0;
    tensorbroker::testing::DaemonProcess& running = r == 0 ? owner : successors.back();
    const pid_t old_pid = running.pid();
    auto next = tensorbroker::testing::DaemonProcess::StartOn(
        socket, {"--takeover", "--capacity", "2G", "--log-level", "warning"});
    if (!next.ok()) Die(next.status().ToString());
    ::waitpid(old_pid, nullptr, 0);
    running.MarkReaped();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the consumer settles
    figures.gap_ms.push_back(static_cast<double>(slowest_us.load()) / 1000.0);
    successors.push_back(*std::move(next));
  }
  stop = true;
  consumer.join();
  if (!successors.empty()) (void)successors.back().Stop();
  figures.failed = failed.load();
  figures.cycles = cycles.load();
  return figures;
}

}  // namespace

int main(int argc, char** argv) {
  int tensors = 1000;
  int rounds = 5;
  CLI::App app;
  app.set_help_flag();  // the usage line is the help
  app.allow_extras();
  bool help = false;
  app.add_flag("-h,--help", help);
  app.add_option("--tensors", tensors)
      ->type_name("N")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--rounds", rounds)
      ->type_name("N")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  const absl::StatusOr<std::vector<std::string>> parsed =
      tensorbroker::ParseWithCli11(app, std::vector<std::string>(argv, argv + argc));
  if (!parsed.ok() || help || !parsed->empty()) {
    if (!parsed.ok()) std::fprintf(stderr, "%s\n", std::string(parsed.status().message()).c_str());
    std::printf("Usage: tensorbroker_restart_bench [--tensors N (1000)] [--rounds N (5)]\n");
    return help && parsed.ok() ? 0 : 2;
  }
  std::printf("tensorbroker restart and takeover figures (%u CPUs)\n\n",
              std::thread::hardware_concurrency());
  std::printf(
      "Restart under the descriptor store (median of %d): exec to READY=1, and to the "
      "first Get answered\n",
      rounds);
  for (int count : {0, tensors}) {
    std::vector<double> ready, served;
    for (const StartFigures& f : MeasureRestarts(count, rounds)) {
      ready.push_back(f.ready_ms);
      served.push_back(f.served_ms);
    }
    std::printf("  %6d adopted tensors: READY=1 %8.1f ms   first Get %8.1f ms\n", count,
                Median(ready), Median(served));
  }
  const TakeoverFigures takeover = MeasureTakeovers(tensors, rounds);
  std::printf(
      "\nTakeover (--takeover, %d tensors, %d takeovers): the slowest Get a cycling "
      "consumer saw during each\n  ",
      tensors, rounds);
  for (double gap : takeover.gap_ms) std::printf("%.1f ms  ", gap);
  std::printf("\n  median %.1f ms; %d Get/release cycles, %d failed\n", Median(takeover.gap_ms),
              takeover.cycles, takeover.failed);
  return 0;
}
