// tensorbroker_bench: latency and throughput figures for tensorbrokerd and the client library.
//
// Prints figures only (no pass/fail); the "targets" block says whether the design goals are met
// on this machine, for information. Everything runs against ONE daemon: started here on a
// temporary socket (`--capacity 6G`) unless --socket names a running one. See bench/README.md.
//
//   1. empty gRPC round trip (Client::Ping): the baseline
//   2. Get and release (the tensor's deleter) of a sealed 4 KiB and a sealed 1 GiB tensor
//   3. moving 1 GiB: (a) Put through the gRPC bytes path (raw stub, client-streamed chunks),
//      (a2) Read the same bytes back out over gRPC, versus (b) zero-copy:
//      Create + memcpy into the shared pages + Seal + Get + release (client library)
//   4. a fresh consumer process's first full read of a 1 GiB tensor after Get, versus reading
//      a local buffer already written, and a fresh malloc'd buffer touched for the first time
#include <dlpack/dlpack.h>
#include <errno.h>
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tensorbroker/client.h"
#include "tensorbroker/v1/broker.grpc.pb.h"

#ifndef TENSORBROKERD_PATH
#define TENSORBROKERD_PATH "tensorbrokerd"
#endif

namespace {

namespace v1 = ::tensorbroker::v1;
using Clock = std::chrono::steady_clock;
using tensorbroker::Client;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;
constexpr uint64_t kGiB = 1024 * kMiB;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// ---- options ----------------------------------------------------------------------------------

struct Options {
  std::string socket;                 // empty: start our own daemon
  std::string daemon = TENSORBROKERD_PATH;
  std::string capacity = "6G";        // passed to our own daemon
  int iterations = 2000;              // small ops (Ping, Get/release)
  int warmup = -1;                    // small ops; -1: iterations / 10
  int large_iterations = 5;           // 1 GiB ops
  int large_warmup = 1;
  uint64_t size_small = 4 * kKiB;
  uint64_t size_large = kGiB;
  uint64_t chunk = kMiB;              // gRPC Put data chunk
  int pin_cpu = -1;                   // bench process
  int pin_daemon_cpu = -2;            // -2: same as --pin-cpu; -1: not pinned
  bool json = false;
  std::string child_read;             // hidden: consumer child mode
};

std::optional<uint64_t> ParseSize(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(text.c_str(), &end);
  if (errno != 0 || end == text.c_str() || value < 0) return std::nullopt;
  std::string suffix(end);
  for (char& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double mult = 1;
  if (suffix.empty() || suffix == "B") {
    mult = 1;
  } else {
    const char unit = suffix[0];
    const std::string rest = suffix.substr(1);
    if (!(rest.empty() || rest == "B" || rest == "I" || rest == "IB")) return std::nullopt;
    switch (unit) {
      case 'K': mult = static_cast<double>(kKiB); break;
      case 'M': mult = static_cast<double>(kMiB); break;
      case 'G': mult = static_cast<double>(kGiB); break;
      case 'T': mult = static_cast<double>(kGiB) * 1024; break;
      default: return std::nullopt;
    }
  }
  return static_cast<uint64_t>(std::llround(value * mult));
}

std::string FormatSize(uint64_t bytes) {
  char buf[64];
  if (bytes >= kGiB && bytes % kGiB == 0) {
    std::snprintf(buf, sizeof buf, "%" PRIu64 " GiB", bytes / kGiB);
  } else if (bytes >= kMiB && bytes % kMiB == 0) {
    std::snprintf(buf, sizeof buf, "%" PRIu64 " MiB", bytes / kMiB);
  } else if (bytes >= kKiB && bytes % kKiB == 0) {
    std::snprintf(buf, sizeof buf, "%" PRIu64 " KiB", bytes / kKiB);
  } else {
    std::snprintf(buf, sizeof buf, "%" PRIu64 " B", bytes);
  }
  return buf;
}

void Usage(const char* argv0) {
  std::printf(
      "usage: %s [flags]\n"
      "  --socket PATH           use the daemon already serving PATH (default: start one)\n"
      "  --daemon PATH           tensorbrokerd to start (default: %s)\n"
      "  --capacity SIZE         --capacity for the daemon we start (default 6G)\n"
      "  --iterations N          timed iterations of the small ops (default 2000)\n"
      "  --warmup N              untimed warm-up iterations of the small ops (default N/10)\n"
      "  --large-iterations N    timed iterations of the large ops (default 5)\n"
      "  --large-warmup N        untimed warm-up iterations of the large ops (default 1)\n"
      "  --size-small SIZE       the small tensor (default 4K)\n"
      "  --size-large SIZE       the large tensor (default 1G; e.g. 64M for a quick run)\n"
      "  --chunk SIZE            gRPC Put data chunk (default 1M; must stay under the\n"
      "                          server's 4 MiB message limit)\n"
      "  --pin-cpu N             pin the bench (and its child processes) to CPU N\n"
      "  --pin-daemon-cpu M      pin the daemon we start to CPU M (default: same as\n"
      "                          --pin-cpu; -1: leave it unpinned)\n"
      "  --json                  also print all figures as one JSON object at the end\n",
      argv0, TENSORBROKERD_PATH);
}

bool ParseArgs(int argc, char** argv, Options* opt) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    bool has_value = false;
    if (const size_t eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_value = true;
    }
    auto next = [&](std::string* out) {
      if (has_value) {
        *out = value;
        return true;
      }
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", arg.c_str());
        return false;
      }
      *out = argv[++i];
      return true;
    };
    auto next_int = [&](int* out) {
      std::string s;
      if (!next(&s)) return false;
      char* end = nullptr;
      const long v = std::strtol(s.c_str(), &end, 10);
      if (end == s.c_str() || *end != '\0') {
        std::fprintf(stderr, "%s: not an integer: '%s'\n", arg.c_str(), s.c_str());
        return false;
      }
      *out = static_cast<int>(v);
      return true;
    };
    auto next_size = [&](uint64_t* out) {
      std::string s;
      if (!next(&s)) return false;
      auto v = ParseSize(s);
      if (!v || *v == 0) {
        std::fprintf(stderr, "%s: not a byte size: '%s'\n", arg.c_str(), s.c_str());
        return false;
      }
      *out = *v;
      return true;
    };
    bool ok = true;
    if (arg == "--help" || arg == "-h") {
      Usage(argv[0]);
      std::exit(0);
    } else if (arg == "--socket") {
      ok = next(&opt->socket);
    } else if (arg == "--daemon") {
      ok = next(&opt->daemon);
    } else if (arg == "--capacity") {
      ok = next(&opt->capacity);
    } else if (arg == "--iterations") {
      ok = next_int(&opt->iterations);
    } else if (arg == "--warmup") {
      ok = next_int(&opt->warmup);
    } else if (arg == "--large-iterations") {
      ok = next_int(&opt->large_iterations);
    } else if (arg == "--large-warmup") {
      ok = next_int(&opt->large_warmup);
    } else if (arg == "--size-small") {
      ok = next_size(&opt->size_small);
    } else if (arg == "--size-large") {
      ok = next_size(&opt->size_large);
    } else if (arg == "--chunk") {
      ok = next_size(&opt->chunk);
    } else if (arg == "--pin-cpu") {
      ok = next_int(&opt->pin_cpu);
    } else if (arg == "--pin-daemon-cpu") {
      ok = next_int(&opt->pin_daemon_cpu);
    } else if (arg == "--json") {
      opt->json = true;
    } else if (arg == "--child-read") {
      ok = next(&opt->child_read);
    } else {
      std::fprintf(stderr, "unknown flag '%s' (see --help)\n", argv[i]);
      ok = false;
    }
    if (!ok) return false;
  }
  if (opt->iterations < 1 || opt->large_iterations < 1) {
    std::fprintf(stderr, "--iterations and --large-iterations must be >= 1\n");
    return false;
  }
  if (opt->warmup < 0) opt->warmup = opt->iterations / 10;
  if (opt->large_warmup < 0) opt->large_warmup = 0;
  if (opt->pin_daemon_cpu == -2) opt->pin_daemon_cpu = opt->pin_cpu;
  return true;
}

bool PinToCpu(pid_t pid, int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(pid, sizeof set, &set) == 0;
}

// ---- buffers ----------------------------------------------------------------------------------

// Sums `n` bytes as uint64 words (a tail shorter than a word is summed bytewise). Opaque to the
// optimizer, so it really reads every byte, also of memory never written.
__attribute__((noinline)) uint64_t SumWords(const void* p, size_t n) {
  asm volatile("" : : "r"(p) : "memory");
  const auto* w = static_cast<const uint64_t*>(p);
  const size_t nw = n / 8;
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  size_t i = 0;
  for (; i + 4 <= nw; i += 4) {
    s0 += w[i];
    s1 += w[i + 1];
    s2 += w[i + 2];
    s3 += w[i + 3];
  }
  for (; i < nw; ++i) s0 += w[i];
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t j = nw * 8; j < n; ++j) s1 += b[j];
  return s0 + s1 + s2 + s3;
}

void FillPattern(void* p, size_t n) {
  auto* w = static_cast<uint64_t*>(p);
  const size_t nw = n / 8;
  for (size_t i = 0; i < nw; ++i) w[i] = (i + 1) * 0x9E3779B97F4A7C15ull;
  auto* b = static_cast<unsigned char*>(p);
  for (size_t j = nw * 8; j < n; ++j) b[j] = static_cast<unsigned char>(j);
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<unsigned char, FreeDeleter>;

Buffer AllocBuffer(size_t n) {
  void* p = nullptr;
  if (posix_memalign(&p, 4096, std::max<size_t>(n, 1)) != 0) return nullptr;
  return Buffer(static_cast<unsigned char*>(p));
}

void* TensorData(const DLManagedTensorVersioned* t) {
  return static_cast<char*>(t->dl_tensor.data) + t->dl_tensor.byte_offset;
}

uint64_t TensorBytes(const DLTensor& t) {
  uint64_t n = (t.dtype.bits * t.dtype.lanes + 7) / 8;
  for (int i = 0; i < t.ndim; ++i) n *= static_cast<uint64_t>(t.shape[i]);
  return n;
}

// ---- statistics & report ----------------------------------------------------------------------

struct Summary {
  double median = 0, p10 = 0, p90 = 0;
  size_t n = 0;
};

double Percentile(const std::vector<int64_t>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return static_cast<double>(sorted[lo]) * (1 - frac) + static_cast<double>(sorted[hi]) * frac;
}

Summary Summarize(std::vector<int64_t> ns) {
  std::sort(ns.begin(), ns.end());
  Summary s;
  s.n = ns.size();
  s.median = Percentile(ns, 0.5);
  s.p10 = Percentile(ns, 0.1);
  s.p90 = Percentile(ns, 0.9);
  return s;
}

std::string FormatNs(double ns) {
  char buf[32];
  const double a = std::fabs(ns);
  auto fmt3 = [&](double v, const char* unit) {
    if (v >= 100) {
      std::snprintf(buf, sizeof buf, "%.0f %s", v, unit);
    } else if (v >= 10) {
      std::snprintf(buf, sizeof buf, "%.1f %s", v, unit);
    } else {
      std::snprintf(buf, sizeof buf, "%.2f %s", v, unit);
    }
  };
  if (a < 1e3) {
    fmt3(ns, "ns");
  } else if (a < 1e6) {
    fmt3(ns / 1e3, "us");
  } else if (a < 1e9) {
    fmt3(ns / 1e6, "ms");
  } else {
    fmt3(ns / 1e9, "s");
  }
  return buf;
}

struct Row {
  std::string key;     // JSON key
  std::string label;   // table text
  Summary s;
  uint64_t bytes = 0;  // moved per iteration, for a rate column (0: none)
};

struct Report {
  std::vector<std::pair<std::string, std::vector<Row>>> sections;
  std::vector<std::string> failures;

  void Section(const std::string& title) { sections.push_back({title, {}}); }
  void Add(const std::string& key, const std::string& label, const std::vector<int64_t>& ns,
           uint64_t bytes = 0) {
    if (ns.empty()) return;
    sections.back().second.push_back(Row{key, label, Summarize(ns), bytes});
  }
  const Row* Find(const std::string& key) const {
    for (const auto& sec : sections) {
      for (const Row& r : sec.second) {
        if (r.key == key) return &r;
      }
    }
    return nullptr;
  }
  void Fail(const std::string& what, const absl::Status& status) {
    failures.push_back(what + ": " + status.ToString());
    std::fprintf(stderr, "tensorbroker_bench: %s: %s\n", what.c_str(),
                 status.ToString().c_str());
  }
};

// ---- the daemon we start ----------------------------------------------------------------------

class OwnDaemon {
 public:
  ~OwnDaemon() {
    if (pid_ > 0) (void)Stop();
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }

  absl::Status Start(const std::string& binary, const std::string& capacity, int pin_cpu) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tbbench.XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) {
      return absl::InternalError(std::string("mkdtemp: ") + strerror(errno));
    }
    dir_ = tmpl;
    socket_ = dir_ + "/broker.sock";
    log_ = dir_ + "/tensorbrokerd.log";
    std::vector<std::string> argv = {binary, "--socket", socket_, "--capacity", capacity};
    std::vector<char*> args;
    for (std::string& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    const int log_fd = open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log_fd < 0) return absl::InternalError(std::string("open log: ") + strerror(errno));
    const pid_t pid = fork();
    if (pid < 0) {
      close(log_fd);
      return absl::InternalError(std::string("fork: ") + strerror(errno));
    }
    if (pid == 0) {  // child: only async-signal-safe calls until exec
      if (pin_cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(pin_cpu, &set);
        if (sched_setaffinity(0, sizeof set, &set) != 0) _exit(126);
      } else {
        // Undo the bench's own pinning, if any: the daemon floats.
        cpu_set_t set;
        CPU_ZERO(&set);
        for (int c = 0; c < CPU_SETSIZE; ++c) CPU_SET(c, &set);
        (void)sched_setaffinity(0, sizeof set, &set);
      }
      dup2(log_fd, STDOUT_FILENO);
      dup2(log_fd, STDERR_FILENO);
      execv(args[0], args.data());
      _exit(127);
    }
    close(log_fd);
    pid_ = pid;
    // Wait until it answers Ping.
    const auto deadline = Clock::now() + std::chrono::seconds(15);
    absl::Status last = absl::UnavailableError("not tried");
    while (Clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return absl::InternalError("tensorbrokerd exited during start-up (" +
                                   DescribeStatus(status) + "); log:\n" + LogTail());
      }
      if (access(socket_.c_str(), F_OK) == 0) {
        auto client = Client::Connect(socket_, std::chrono::milliseconds(500));
        if (client.ok()) {
          last = (*client)->Ping();
          if (last.ok()) return absl::OkStatus();
        } else {
          last = client.status();
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return absl::DeadlineExceededError("tensorbrokerd did not serve on " + socket_ + ": " +
                                       last.ToString() + "; log:\n" + LogTail());
  }

  // SIGTERM, wait up to 10 s, then SIGKILL. Returns a description of how it ended.
  std::string Stop() {
    if (pid_ <= 0) return "not running";
    const int64_t t0 = NowNs();
    kill(pid_, SIGTERM);
    int status = 0;
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    std::string how;
    while (true) {
      const pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        how = DescribeStatus(status) + " " + FormatNs(static_cast<double>(NowNs() - t0)) +
              " after SIGTERM";
        break;
      }
      if (r < 0 && errno != EINTR) {
        how = std::string("waitpid: ") + strerror(errno);
        break;
      }
      if (Clock::now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        how = "did NOT exit within 10 s of SIGTERM; killed with SIGKILL";
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    pid_ = -1;
    clean_exit_ = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    return how;
  }

  bool clean_exit() const { return clean_exit_; }
  const std::string& socket() const { return socket_; }
  pid_t pid() const { return pid_; }

  std::string LogTail(size_t max_lines = 30) const {
    std::ifstream in(log_);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    std::string out;
    const size_t from = lines.size() > max_lines ? lines.size() - max_lines : 0;
    for (size_t i = from; i < lines.size(); ++i) out += "  | " + lines[i] + "\n";
    return out.empty() ? "  | (empty)\n" : out;
  }

  static std::string DescribeStatus(int status) {
    if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) return std::string("killed by signal ") + strsignal(WTERMSIG(status));
    return "status " + std::to_string(status);
  }

 private:
  pid_t pid_ = -1;
  bool clean_exit_ = false;
  std::string dir_, socket_, log_;
};

// ---- helpers over the client library ----------------------------------------------------------

// Publishes `nbytes` of `src` under `name` (Create + memcpy + Seal + drop the producer's lease).
absl::Status Publish(Client& client, const std::string& name, const void* src, uint64_t nbytes) {
  auto w = client.Create(name, {static_cast<int64_t>(nbytes)}, tensorbroker::dtypes::kUInt8);
  if (!w.ok()) return w.status();
  std::memcpy(TensorData(*w), src, nbytes);
  auto info = client.Seal(name);
  (*w)->deleter(*w);
  return info.status();
}

void DeleteQuietly(Client& client, const std::string& name) { (void)client.Delete(name); }

// ---- 1. Ping ----------------------------------------------------------------------------------

absl::Status BenchPing(Client& client, const Options& opt, Report& rep) {
  for (int i = 0; i < opt.warmup; ++i) {
    if (absl::Status s = client.Ping(); !s.ok()) return s;
  }
  std::vector<int64_t> ns;
  ns.reserve(opt.iterations);
  for (int i = 0; i < opt.iterations; ++i) {
    const int64_t t0 = NowNs();
    absl::Status s = client.Ping();
    const int64_t t1 = NowNs();
    if (!s.ok()) return s;
    ns.push_back(t1 - t0);
  }
  rep.Add("ping", "empty round trip (Client::Ping)", ns);
  return absl::OkStatus();
}

// ---- 2. Get + release -------------------------------------------------------------------------

absl::Status BenchGetRelease(Client& client, const Options& opt, const std::string& name,
                             uint64_t nbytes, const void* src, const std::string& key,
                             Report& rep) {
  if (absl::Status s = Publish(client, name, src, nbytes); !s.ok()) return s;
  // Sanity: the first Get sees the right size and bytes.
  {
    auto t = client.Get(name);
    if (!t.ok()) return t.status();
    tensorbroker::TensorPtr hold(*t);
    if (TensorBytes(hold->dl_tensor) != nbytes) {
      return absl::InternalError("Get returned " + std::to_string(TensorBytes(hold->dl_tensor)) +
                                 " bytes, expected " + std::to_string(nbytes));
    }
    const size_t probe = std::min<uint64_t>(nbytes, 64);
    if (std::memcmp(TensorData(hold.get()), src, probe) != 0 ||
        std::memcmp(static_cast<char*>(TensorData(hold.get())) + nbytes - probe,
                    static_cast<const char*>(src) + nbytes - probe, probe) != 0) {
      return absl::InternalError("Get returned bytes that differ from what was published");
    }
  }
  for (int i = 0; i < opt.warmup; ++i) {
    auto t = client.Get(name);
    if (!t.ok()) return t.status();
    (*t)->deleter(*t);
  }
  std::vector<int64_t> get_ns, rel_ns, both_ns;
  get_ns.reserve(opt.iterations);
  rel_ns.reserve(opt.iterations);
  both_ns.reserve(opt.iterations);
  for (int i = 0; i < opt.iterations; ++i) {
    const int64_t t0 = NowNs();
    auto t = client.Get(name);
    const int64_t t1 = NowNs();
    if (!t.ok()) return t.status();
    (*t)->deleter(*t);
    const int64_t t2 = NowNs();
    get_ns.push_back(t1 - t0);
    rel_ns.push_back(t2 - t1);
    both_ns.push_back(t2 - t0);
  }
  const std::string sz = FormatSize(nbytes);
  rep.Add(key + "_get", "Get " + sz, get_ns);
  rep.Add(key + "_release", "release (deleter) " + sz, rel_ns);
  rep.Add(key + "_get_release", "Get + release " + sz, both_ns);
  return absl::OkStatus();
}

// ---- 3. moving 1 GiB --------------------------------------------------------------------------

// Client-streamed Put through the generated stub: header, then `chunk`-sized data messages.
absl::Status GrpcPut(v1::Broker::Stub& stub, const std::string& name, const unsigned char* src,
                     uint64_t nbytes, uint64_t chunk) {
  grpc::ClientContext ctx;
  v1::TensorInfo info;
  std::unique_ptr<grpc::ClientWriter<v1::PutRequest>> writer = stub.Put(&ctx, &info);
  v1::PutRequest req;
  auto* h = req.mutable_header();
  h->set_name(name);
  h->mutable_dtype()->set_code(kDLUInt);
  h->mutable_dtype()->set_bits(8);
  h->mutable_dtype()->set_lanes(1);
  h->add_shape(static_cast<int64_t>(nbytes));
  h->mutable_device()->set_device_type(kDLCPU);
  h->mutable_device()->set_device_id(0);
  bool ok = writer->Write(req);
  for (uint64_t off = 0; ok && off < nbytes; off += chunk) {
    const uint64_t len = std::min(chunk, nbytes - off);
    req.set_data(src + off, len);  // the bytes path's first copy: into the message
    ok = writer->Write(req);
  }
  writer->WritesDone();
  const grpc::Status st = writer->Finish();
  if (!st.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                        "gRPC Put: " + st.error_message());
  }
  if (!ok) return absl::InternalError("gRPC Put: stream broke without an error status");
  if (info.nbytes() != nbytes) {
    return absl::InternalError("gRPC Put: daemon reports " + std::to_string(info.nbytes()) +
                               " bytes, sent " + std::to_string(nbytes));
  }
  return absl::OkStatus();
}

// Server-streamed Read into `dst` (already faulted in).
absl::Status GrpcRead(v1::Broker::Stub& stub, const std::string& name, unsigned char* dst,
                      uint64_t nbytes) {
  grpc::ClientContext ctx;
  v1::ReadRequest req;
  req.set_name(name);
  std::unique_ptr<grpc::ClientReader<v1::ReadResponse>> reader = stub.Read(&ctx, req);
  v1::ReadResponse resp;
  uint64_t off = 0;
  bool overflow = false;
  while (reader->Read(&resp)) {
    const std::string& d = resp.data();
    if (off + d.size() > nbytes) {
      overflow = true;
      continue;
    }
    std::memcpy(dst + off, d.data(), d.size());
    off += d.size();
  }
  const grpc::Status st = reader->Finish();
  if (!st.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                        "gRPC Read: " + st.error_message());
  }
  if (overflow || off != nbytes) {
    return absl::InternalError("gRPC Read returned " + std::string(overflow ? "more than " : "") +
                               std::to_string(off) + " bytes, expected " +
                               std::to_string(nbytes));
  }
  return absl::OkStatus();
}

absl::Status BenchMoveLarge(Client& client, v1::Broker::Stub& stub, const Options& opt,
                            const unsigned char* src, unsigned char* dst, Report& rep) {
  const uint64_t n = opt.size_large;
  std::vector<int64_t> put_ns, read_ns, zc_ns, zc_create_ns, zc_fill_ns, zc_seal_ns, zc_get_ns;
  const int total = opt.large_warmup + opt.large_iterations;
  for (int it = 0; it < total; ++it) {
    const bool timed = it >= opt.large_warmup;
    const std::string put_name = "bench/move/put/" + std::to_string(it);
    const std::string zc_name = "bench/move/zc/" + std::to_string(it);

    // (a) gRPC bytes path in.
    int64_t t0 = NowNs();
    absl::Status s = GrpcPut(stub, put_name, src, n, opt.chunk);
    int64_t t1 = NowNs();
    if (!s.ok()) return s;
    // (a2) and out again.
    std::memset(dst, 0, 4096);  // so a stale copy cannot pass the check below
    int64_t t2 = NowNs();
    s = GrpcRead(stub, put_name, dst, n);
    int64_t t3 = NowNs();
    if (!s.ok()) return s;
    if (std::memcmp(dst, src, n) != 0) {
      return absl::InternalError("gRPC Read returned bytes that differ from those Put");
    }
    if (s = client.Delete(put_name); !s.ok()) return s;
    if (timed) {
      put_ns.push_back(t1 - t0);
      read_ns.push_back(t3 - t2);
    }

    // (b) zero-copy: Create + fill in place + Seal + Get + release.
    const int64_t z0 = NowNs();
    auto w = client.Create(zc_name, {static_cast<int64_t>(n)}, tensorbroker::dtypes::kUInt8);
    const int64_t z1 = NowNs();
    if (!w.ok()) return w.status();
    std::memcpy(TensorData(*w), src, n);
    const int64_t z2 = NowNs();
    auto info = client.Seal(zc_name);
    (*w)->deleter(*w);
    const int64_t z3 = NowNs();
    if (!info.ok()) return info.status();
    auto g = client.Get(zc_name);
    if (!g.ok()) return g.status();
    (*g)->deleter(*g);
    const int64_t z4 = NowNs();
    if (s = client.Delete(zc_name); !s.ok()) return s;
    if (timed) {
      zc_ns.push_back(z4 - z0);
      zc_create_ns.push_back(z1 - z0);
      zc_fill_ns.push_back(z2 - z1);
      zc_seal_ns.push_back(z3 - z2);
      zc_get_ns.push_back(z4 - z3);
    }
  }
  const std::string sz = FormatSize(n);
  rep.Add("grpc_put_large", "(a)  gRPC Put " + sz + " (" + FormatSize(opt.chunk) + " chunks)",
          put_ns, n);
  rep.Add("grpc_read_large", "(a2) gRPC Read " + sz + " into a local buffer", read_ns, n);
  rep.Add("zero_copy_large", "(b)  zero-copy " + sz + ": Create+fill+Seal+Get+release", zc_ns,
          n);
  rep.Add("zero_copy_large_create", "       Create", zc_create_ns);
  rep.Add("zero_copy_large_fill", "       fill (memcpy into shared pages)", zc_fill_ns, n);
  rep.Add("zero_copy_large_seal", "       Seal + producer release", zc_seal_ns);
  rep.Add("zero_copy_large_get_release", "       Get + release", zc_get_ns);
  return absl::OkStatus();
}

// ---- 4. first read by a fresh consumer process ------------------------------------------------

struct ChildResult {
  int64_t connect_ns = 0, get_ns = 0, read_ns = 0, release_ns = 0;
  uint64_t sum = 0;
};

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

absl::StatusOr<ChildResult> RunChild(const std::string& self, const std::string& socket,
                                     const std::string& name) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError(std::string("pipe: ") + strerror(errno));
  std::vector<std::string> argv = {self, "--child-read", name, "--socket", socket};
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return absl::InternalError(std::string("fork: ") + strerror(errno));
  }
  if (pid == 0) {  // child: inherits the bench's CPU affinity
    dup2(fds[1], STDOUT_FILENO);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t r = read(fds[0], buf, sizeof buf);
    if (r > 0) {
      out.append(buf, static_cast<size_t>(r));
    } else if (r == 0 || errno != EINTR) {
      break;
    }
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
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

std::string SelfPath(const char* argv0) {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(argv0) : p.string();
}

absl::Status BenchFirstRead(const Options& opt, const std::string& self,
                            const std::string& socket, const std::string& name,
                            const unsigned char* src, uint64_t expected_sum, Report& rep) {
  const uint64_t n = opt.size_large;
  std::vector<int64_t> child_read, child_get, child_rel, warm_read, fresh_read;
  const int total = opt.large_warmup + opt.large_iterations;
  for (int it = 0; it < total; ++it) {
    auto r = RunChild(self, socket, name);
    if (!r.ok()) return r.status();
    if (r->sum != expected_sum) {
      return absl::InternalError("consumer child summed " + std::to_string(r->sum) +
                                 ", expected " + std::to_string(expected_sum));
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
    if (p == MAP_FAILED) return absl::ResourceExhaustedError(std::string("mmap: ") + strerror(errno));
    const int64_t t0 = NowNs();
    const uint64_t sum = SumWords(p, n);
    const int64_t t1 = NowNs();
    asm volatile("" : : "r"(sum) : "memory");
    munmap(p, n);
    if (it >= opt.large_warmup) fresh_read.push_back(t1 - t0);
  }
  const std::string sz = FormatSize(n);
  rep.Add("child_get_large", "fresh consumer process: Get " + sz, child_get);
  rep.Add("child_first_read_large", "fresh consumer process: first full read " + sz,
          child_read, n);
  rep.Add("child_release_large", "fresh consumer process: release " + sz, child_rel);
  rep.Add("local_warm_read_large", "local buffer, already written: full read " + sz, warm_read,
          n);
  rep.Add("local_fresh_read_large", "fresh malloc'd buffer, first touch by reading: full read " + sz,
          fresh_read, n);
  return absl::OkStatus();
}

// ---- output -----------------------------------------------------------------------------------

std::string Rate(uint64_t bytes, double ns) {
  if (bytes == 0 || ns <= 0) return "";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB/s",
                static_cast<double>(bytes) / static_cast<double>(kGiB) / (ns / 1e9));
  return buf;
}

struct Ratio {
  std::string key, label, target;  // target empty: informational
  std::optional<double> value;
  std::optional<bool> met;
};

std::optional<double> RatioOf(const Report& rep, const std::string& num, const std::string& den) {
  const Row* a = rep.Find(num);
  const Row* b = rep.Find(den);
  if (a == nullptr || b == nullptr || b->s.median <= 0) return std::nullopt;
  return a->s.median / b->s.median;
}

std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  if (!ParseArgs(argc, argv, &opt)) return 2;
  if (!opt.child_read.empty()) return ChildRead(opt);
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
    daemon_desc = opt.daemon + " --socket " + socket + " --capacity " + opt.capacity +
                  " (pid " + std::to_string(own.pid()) + ", started by the bench)";
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

    rep.Section("1. baseline");
    if (absl::Status s = BenchPing(client, opt, rep); !s.ok()) rep.Fail("Ping", s);

    rep.Section("2. Get / release of a sealed tensor");
    if (absl::Status s = BenchGetRelease(client, opt, small_name, opt.size_small, small.get(),
                                         "small", rep);
        !s.ok()) {
      rep.Fail("Get/release " + FormatSize(opt.size_small), s);
    }
    bool large_published = false;
    if (absl::Status s =
            BenchGetRelease(client, opt, large_name, n, src.get(), "large", rep);
        !s.ok()) {
      rep.Fail("Get/release " + FormatSize(n), s);
    } else {
      large_published = true;
    }

    rep.Section("3. moving " + FormatSize(n) + " into (and out of) the broker");
    {
      grpc::ChannelArguments args;
      args.SetMaxReceiveMessageSize(-1);
      args.SetMaxSendMessageSize(-1);
      auto channel = grpc::CreateCustomChannel("unix:" + socket,
                                               grpc::InsecureChannelCredentials(), args);
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
      if (opt.socket.empty() && (st->used_bytes != 0 || st->tensors != 0 || st->leases != 0 ||
                                 st->pending != 0)) {
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

  // ---- the table ----
  const int w = 58;
  std::printf("%-*s %10s %10s %10s %7s  %s\n", w, "measurement", "median", "p10", "p90", "iters",
              "rate@median");
  std::printf("%s\n", std::string(w + 54, '-').c_str());
  for (const auto& [title, rows] : rep.sections) {
    std::printf("%s\n", title.c_str());
    if (rows.empty()) std::printf("  (no figures: see the errors below)\n");
    for (const Row& r : rows) {
      std::printf("  %-*s %10s %10s %10s %7zu  %s\n", w - 2, r.label.c_str(),
                  FormatNs(r.s.median).c_str(), FormatNs(r.s.p10).c_str(),
                  FormatNs(r.s.p90).c_str(), r.s.n, Rate(r.bytes, r.s.median).c_str());
    }
  }

  // ---- ratios ----
  const std::string ssz = FormatSize(opt.size_small), lsz = FormatSize(opt.size_large);
  std::vector<Ratio> ratios;
  {
    Ratio r{"get_small_over_ping", "Get(" + ssz + ") / Ping", "Get <= 1.3x empty round trip",
            RatioOf(rep, "small_get", "ping"), std::nullopt};
    if (r.value) r.met = *r.value <= 1.3;
    ratios.push_back(r);
  }
  {
    Ratio r{"get_large_over_get_small", "Get(" + lsz + ") / Get(" + ssz + ")",
            lsz + " Get <= 1.2x " + ssz + " Get", RatioOf(rep, "large_get", "small_get"),
            std::nullopt};
    if (r.value) r.met = *r.value <= 1.2;
    ratios.push_back(r);
  }
  {
    Ratio r{"grpc_put_over_zero_copy", "gRPC Put / zero-copy (" + lsz + ")",
            "zero-copy >= 20x faster than gRPC bytes at " + lsz,
            RatioOf(rep, "grpc_put_large", "zero_copy_large"), std::nullopt};
    if (r.value) r.met = *r.value >= 20;
    ratios.push_back(r);
  }
  ratios.push_back(Ratio{"get_release_small_over_ping", "Get+release(" + ssz + ") / Ping", "",
                         RatioOf(rep, "small_get_release", "ping"), std::nullopt});
  ratios.push_back(Ratio{"grpc_read_over_zero_copy", "gRPC Read / zero-copy (" + lsz + ")", "",
                         RatioOf(rep, "grpc_read_large", "zero_copy_large"), std::nullopt});
  ratios.push_back(Ratio{"grpc_put_over_zero_copy_fill", "gRPC Put / zero-copy fill alone", "",
                         RatioOf(rep, "grpc_put_large", "zero_copy_large_fill"), std::nullopt});
  ratios.push_back(Ratio{"child_first_read_over_local_warm_read",
                         "consumer first read / local written buffer read", "",
                         RatioOf(rep, "child_first_read_large", "local_warm_read_large"),
                         std::nullopt});
  ratios.push_back(Ratio{"child_first_read_over_local_fresh_read",
                         "consumer first read / fresh malloc first read", "",
                         RatioOf(rep, "child_first_read_large", "local_fresh_read_large"),
                         std::nullopt});

  std::printf("\nratios (of medians)\n");
  std::printf("%s\n", std::string(w + 54, '-').c_str());
  for (const Ratio& r : ratios) {
    char val[32];
    if (r.value) {
      std::snprintf(val, sizeof val, "%.2fx", *r.value);
    } else {
      std::snprintf(val, sizeof val, "n/a");
    }
    const std::string verdict =
        r.target.empty() ? "(informational)"
                         : (!r.met ? "n/a" : (*r.met ? "met" : "not met"));
    std::printf("  %-48s %9s   %-9s %s\n", r.label.c_str(), val, verdict.c_str(),
                r.target.empty() ? "" : ("target: " + r.target).c_str());
  }
  if (!stats_after.empty()) std::printf("\nbroker after the run: %s\n", stats_after.c_str());
  if (opt.socket.empty()) std::printf("daemon: %s\n", stop_desc.c_str());
  if (!rep.failures.empty()) {
    rc = 1;
    std::printf("\nERRORS (figures above are incomplete):\n");
    for (const std::string& f : rep.failures) std::printf("  - %s\n", f.c_str());
  }

  if (opt.json) {
    std::string j = "{\"config\":{";
    j += "\"iterations\":" + std::to_string(opt.iterations);
    j += ",\"warmup\":" + std::to_string(opt.warmup);
    j += ",\"large_iterations\":" + std::to_string(opt.large_iterations);
    j += ",\"large_warmup\":" + std::to_string(opt.large_warmup);
    j += ",\"size_small\":" + std::to_string(opt.size_small);
    j += ",\"size_large\":" + std::to_string(opt.size_large);
    j += ",\"chunk\":" + std::to_string(opt.chunk);
    j += ",\"pin_cpu\":" + std::to_string(opt.pin_cpu);
    j += ",\"pin_daemon_cpu\":" + std::to_string(opt.socket.empty() ? opt.pin_daemon_cpu : -1);
    j += ",\"pinning\":\"" + JsonEscape(pin_mode) + "\"";
    j += ",\"cpus\":" + std::to_string(std::thread::hardware_concurrency());
    j += ",\"external_daemon\":" + std::string(opt.socket.empty() ? "false" : "true");
    j += "},\"measurements\":{";
    bool first = true;
    char buf[256];
    for (const auto& sec : rep.sections) {
      for (const Row& r : sec.second) {
        std::snprintf(buf, sizeof buf,
                      "\"median_ns\":%.1f,\"p10_ns\":%.1f,\"p90_ns\":%.1f,\"iterations\":%zu",
                      r.s.median, r.s.p10, r.s.p90, r.s.n);
        j += std::string(first ? "" : ",") + "\"" + r.key + "\":{" + buf;
        if (r.bytes > 0) j += ",\"bytes\":" + std::to_string(r.bytes);
        j += "}";
        first = false;
      }
    }
    j += "},\"ratios\":{";
    first = true;
    for (const Ratio& r : ratios) {
      j += std::string(first ? "" : ",") + "\"" + r.key + "\":{\"value\":";
      if (r.value) {
        std::snprintf(buf, sizeof buf, "%.4f", *r.value);
        j += buf;
      } else {
        j += "null";
      }
      if (!r.target.empty()) {
        j += ",\"target\":\"" + JsonEscape(r.target) + "\",\"met\":";
        j += r.met ? (*r.met ? "true" : "false") : "null";
      }
      j += "}";
      first = false;
    }
    j += "},\"errors\":[";
    for (size_t i = 0; i < rep.failures.size(); ++i) {
      j += (i ? ",\"" : "\"") + JsonEscape(rep.failures[i]) + "\"";
    }
    j += "]}";
    std::printf("\n%s\n", j.c_str());
  }
  return rc;
}
