#include "bench/first_read.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/buffers.h"
#include "bench/own_daemon.h"
#include "bench/units.h"
#include "tensorbroker/client.h"
#include "tests/support/subprocess.h"

namespace tensorbroker::bench {
namespace {

struct ChildResult {
  int64_t connect_ns = 0, get_ns = 0, read_ns = 0, release_ns = 0;
  uint64_t sum = 0;
};

// Starts one consumer child and parses the figures it prints on its stdout (a pipe).
absl::StatusOr<ChildResult> RunChild(const std::string& self, const std::string& socket,
                                     const std::string& name) {
  testing::SubprocessOptions options;  // it inherits the bench's CPU affinity
  options.capture_stdout = true;
  auto child =
      testing::Subprocess::Spawn({self, "--child-read", name, "--socket", socket}, options);
  if (!child.ok()) return child.status();
  absl::StatusOr<testing::ProcessOutput> done = child->Finish();
  if (!done.ok()) return done.status();
  const std::string& out = done->out;
  const int status = done->status;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError("consumer child failed (" + OwnDaemon::DescribeStatus(status) +
                               "): " + out);
  }
  ChildResult r;
  if (std::sscanf(out.c_str(),
                  "TBCHILD connect_ns=%" SCNd64 " get_ns=%" SCNd64 " read_ns=%" SCNd64
                  " release_ns=%" SCNd64 " sum=%" SCNu64,
                  &r.connect_ns, &r.get_ns, &r.read_ns, &r.release_ns, &r.sum) != 5) {
    return absl::InternalError("cannot parse the consumer child's output: " + out);
  }
  return r;
}

}  // namespace

// The hidden --child-read mode: Get, time the full read, print the numbers, exit.
int ChildRead(const Options& opt) {
  const int64_t c0 = NowNs();
  auto client = Client::Connect(opt.socket);
  const int64_t c1 = NowNs();
  if (!client.ok()) {
    std::fprintf(stderr, "child: Connect: %s\n", client.status().ToString().c_str());
    return 1;
  }
  const int64_t t0 = NowNs();
  auto t = (*client)->Get(opt.child_read);
  const int64_t t1 = NowNs();
  if (!t.ok()) {
    std::fprintf(stderr, "child: Get: %s\n", t.status().ToString().c_str());
    return 1;
  }
  const uint64_t nbytes = TensorBytes((*t)->dl_tensor);
  const int64_t t2 = NowNs();
  const uint64_t sum = SumWords(TensorData(*t), nbytes);
  const int64_t t3 = NowNs();
  (*t)->deleter(*t);
  const int64_t t4 = NowNs();
  std::printf("TBCHILD connect_ns=%" PRId64 " get_ns=%" PRId64 " read_ns=%" PRId64
              " release_ns=%" PRId64 " sum=%" PRIu64 "\n",
              c1 - c0, t1 - t0, t3 - t2, t4 - t3, sum);
  std::fflush(stdout);
  return 0;
}

std::string SelfPath(const char* argv0) {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(argv0) : p.string();
}

absl::Status BenchFirstRead(const Options& opt, const std::string& self, const std::string& socket,
                            const std::string& name, const unsigned char* src,
                            uint64_t expected_sum, Report& rep) {
  const uint64_t n = opt.size_large;
  std::vector<int64_t> child_read, child_get, child_rel, warm_read, fresh_read;
  const int total = opt.large_warmup + opt.large_iterations;
  for (int it = 0; it < total; ++it) {
    auto r = RunChild(self, socket, name);
    if (!r.ok()) return r.status();
    if (r->sum != expected_sum) {
      return absl::InternalError("consumer child summed " + std::to_string(r->sum) + ", expected " +
                                 std::to_string(expected_sum));
    }
    if (it >= opt.large_warmup) {
      child_read.push_back(r->read_ns);
      child_get.push_back(r->get_ns);
      child_rel.push_back(r->release_ns);
    }
  }
  for (int it = 0; it < total; ++it) {
    const int64_t t0 = NowNs();
    const uint64_t sum = SumWords(src, n);
    const int64_t t1 = NowNs();
    if (sum != expected_sum) return absl::InternalError("local sum mismatch");
    if (it >= opt.large_warmup) warm_read.push_back(t1 - t0);
  }
  for (int it = 0; it < total; ++it) {
    // What malloc does for a block this large (glibc mmaps anything over 32 MiB), done
    // explicitly so that the pages are new whatever --size-large is.
    void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      return absl::ResourceExhaustedError(std::string("mmap: ") + strerror(errno));
    const int64_t t0 = NowNs();
    const uint64_t sum = SumWords(p, n);
    const int64_t t1 = NowNs();
    asm volatile("" : : "r"(sum) : "memory");
    munmap(p, n);
    if (it >= opt.large_warmup) fresh_read.push_back(t1 - t0);
  }
  const std::string sz = FormatSize(n);
  rep.Add("child_get_large", "fresh consumer process: Get " + sz, child_get);
  rep.Add("child_first_read_large", "fresh consumer process: first full read " + sz, child_read, n);
  rep.Add("child_release_large", "fresh consumer process: release " + sz, child_rel);
  rep.Add("local_warm_read_large", "local buffer, already written: full read " + sz, warm_read, n);
  rep.Add("local_fresh_read_large",
          "fresh malloc'd buffer, first touch by reading: full read " + sz, fresh_read, n);
  return absl::OkStatus();
}

}  // namespace tensorbroker::bench
