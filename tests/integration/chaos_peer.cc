// tensorbroker_chaos_peer: one client process of the chaos soak (soak_test.cc) and of the
// client-side soak. It works at random until its stdin closes (or it is SIGKILLed, which is the
// point), checking every byte it reads against its producer's stamp (stamped_tensor.h).
//
//   producer --slot K --seed S   names soak/K/0..7: put, create+fill+seal, create+abort,
//                                replace, delete, and gets of its own names, holding some
//   consumer --seed S --slots N  gets of soak/0..N-1/*, holding up to 16 views (and Retains of
//                                them) for a while, re-checking each view before releasing it
//   client-soak NAME CYCLES      Get, read every byte, Retain, release both, CYCLES times;
//                                prints "soak fds=A/B maps=A/B other_maps=A/B heap=A/B"
//                                (after a warm-up tenth of the cycles, and at the end; maps
//                                are mappings of broker memory)
// Every role takes --socket PATH. Lines: "progress ops=N reads=R bytes=B" every 256
// operations and at the end (then "done"); "corrupt NAME ..." when a read differs from its
// producer's bytes; "error OP CODE message" for an answer the workload never expects (a name
// that is absent or already taken is expected). Exit: 0 at stdin EOF with no corrupt read or
// error, 1 otherwise; 2 on bad usage.
#include <dirent.h>
#include <dlpack/dlpack.h>
#include <malloc.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensorbroker/client.h"
#include "tests/integration/peer_output.h"
#include "tests/integration/stamped_tensor.h"
#include "tests/support/host_tensor.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TB_SANITIZER_HEAP 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TB_SANITIZER_HEAP 1
#endif
#ifdef TB_SANITIZER_HEAP
// The sanitizer runtimes' allocator statistics (sanitizer/allocator_interface.h, which GCC does
// not install).
extern "C" size_t __sanitizer_get_current_allocated_bytes();
#endif

namespace {

using tensorbroker::Client;
using tensorbroker::TensorPtr;
using tensorbroker::testing::FillStamped;
using tensorbroker::testing::FirstUnstampedElement;

constexpr int kNamesPerSlot = 8;
// Elements of the tensors producers publish: pooled blocks of several sizes, and one of 2.3 MiB.
constexpr int64_t kSizes[] = {2, 64, 4096, 65536, 300000};
constexpr size_t kMaxHeld = 16;

using tensorbroker::testing::Say;

[[noreturn]] void Usage(const std::string& why) {
  tensorbroker::testing::UsageError("tensorbroker_chaos_peer", why);
}

// Whether stdin has reached EOF (checked without blocking).
bool StdinClosed() {
  pollfd in{STDIN_FILENO, POLLIN, 0};
  if (::poll(&in, 1, 0) <= 0) return false;
  char buffer[64];
  return ::read(STDIN_FILENO, buffer, sizeof buffer) <= 0;
}

struct Counters {
  uint64_t ops = 0, reads = 0, bytes = 0, corrupt = 0, errors = 0;
  void Report() const {
    Say(absl::StrCat("progress ops=", ops, " reads=", reads, " bytes=", bytes));
  }
};

// A view of a published tensor: what Get (or Retain) returned, and the name it was read by.
struct View {
  std::string name;
  TensorPtr tensor;
};

class Worker {
 public:
  Worker(std::unique_ptr<Client> client, uint32_t seed)
      : client_(std::move(client)), random_(seed) {}

  int Run(bool producer, int slot, int slots) {
    while (!StdinClosed()) {
      if (producer) {
        ProducerStep(slot);
      } else {
        ConsumerStep(slots);
      }
      if (++counters_.ops % 256 == 0) counters_.Report();
    }
    for (View& view : held_) Check(view);
    held_.clear();
    counters_.Report();
    Say("done");
    return counters_.corrupt == 0 && counters_.errors == 0 ? 0 : 1;
  }

 private:
  int Pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(random_); }

  std::string NameIn(int slot) { return absl::StrCat("soak/", slot, "/", Pick(kNamesPerSlot)); }

  // Counts an answer the workload does not expect (absent and taken names are expected, and a
  // waiting Get's wait may run out).
  void Expect(const absl::Status& status, const char* op, bool waited = false) {
    if (status.ok() || absl::IsNotFound(status) || absl::IsAlreadyExists(status)) return;
    if (waited && absl::IsDeadlineExceeded(status)) return;
    ++counters_.errors;
    Say(absl::StrCat("error ", op, " ", absl::StatusCodeToString(status.code()), " ",
                     status.message()));
  }

  // Every element of `view` must be its producer's.
  void Check(const View& view) {
    const DLTensor& t = view.tensor->dl_tensor;
    const auto* values =
        reinterpret_cast<const uint64_t*>(static_cast<const char*>(t.data) + t.byte_offset);
    const uint64_t elements = static_cast<uint64_t>(t.shape[0]);
    if (auto bad = FirstUnstampedElement(view.name, values, elements)) {
      ++counters_.corrupt;
      Say(absl::StrCat("corrupt ", view.name, " element ", *bad, " of ", elements, " is ",
                       values[*bad]));
    }
    ++counters_.reads;
    counters_.bytes += elements * sizeof(uint64_t);
  }

  // Gets `name` (NOT_FOUND is fine), checks it, and holds it a while or lets it go.
  void GetAndMaybeHold(const std::string& name) {
    tensorbroker::GetOptions options;
    if (Pick(8) == 0) options.timeout = std::chrono::milliseconds(20);
    auto got = client_->Get(name, options);
    if (!got.ok()) return Expect(got.status(), "get", options.timeout.count() > 0);
    View view{name, TensorPtr(*got)};
    Check(view);
    if (Pick(2) == 0 && held_.size() < kMaxHeld) {
      if (Pick(4) == 0) {  // a second handle sharing the lease
        auto again = client_->Retain(*view.tensor);
        if (!again.ok()) return Expect(again.status(), "retain");
        held_.push_back(View{name, TensorPtr(*again)});
      }
      held_.push_back(std::move(view));
    }
  }

  // Releases a held view (after checking it once more: a lease keeps its bytes).
  void ReleaseOne() {
    if (held_.empty()) return;
    const size_t i = static_cast<size_t>(Pick(static_cast<int>(held_.size())));
    Check(held_[i]);
    held_.erase(held_.begin() + static_cast<std::ptrdiff_t>(i));
  }

  void ProducerStep(int slot) {
    const std::string name = NameIn(slot);
    const int op = Pick(20);
    const bool replace = Pick(3) != 0;
    if (op < 6) {  // put
      std::vector<uint64_t> values(static_cast<size_t>(kSizes[Pick(5)]));
      FillStamped(name, NextStamp(), values.data(), values.size());
      std::vector<int64_t> shape = {static_cast<int64_t>(values.size())};
      const DLTensor source =
          tensorbroker::testing::HostTensor(values.data(), shape, tensorbroker::dtypes::kUInt64);
      tensorbroker::PutOptions put;
      put.replace = replace;
      Expect(client_->Put(name, source, put).status(), "put");
    } else if (op < 12) {  // create, fill, seal (or abort)
      tensorbroker::CreateOptions create;
      create.replace = replace;
      const int64_t elements = kSizes[Pick(5)];
      auto made = client_->Create(name, {elements}, tensorbroker::dtypes::kUInt64, create);
      if (!made.ok()) return Expect(made.status(), "create");
      TensorPtr writable(*made);
      FillStamped(name, NextStamp(), static_cast<uint64_t*>(writable->dl_tensor.data),
                  static_cast<uint64_t>(elements));
      writable.reset();
      if (Pick(4) == 0) return Expect(client_->Abort(name), "abort");
      Expect(client_->Seal(name).status(), "seal");
    } else if (op < 15) {
      Expect(client_->Delete(name), "delete");
    } else if (op < 18) {
      GetAndMaybeHold(name);
    } else {
      ReleaseOne();
    }
  }

  void ConsumerStep(int slots) {
    if (Pick(3) == 0) return ReleaseOne();
    GetAndMaybeHold(NameIn(Pick(slots)));
  }

  // Unique across processes and time: the pid, then a counter.
  uint64_t NextStamp() { return (static_cast<uint64_t>(::getpid()) << 32) | ++stamps_; }

  std::unique_ptr<Client> client_;
  std::mt19937 random_;
  Counters counters_;
  std::vector<View> held_;
  uint64_t stamps_ = 0;
};

size_t CountEntries(const char* directory) {
  size_t n = 0;
  if (DIR* dir = ::opendir(directory)) {
    while (const dirent* entry = ::readdir(dir)) n += entry->d_name[0] != '.';
    ::closedir(dir);
  }
  return n;
}

// Mappings of broker memory (segments are memfds: "/memfd:tb-..."), and all others (libraries,
// thread stacks, the allocator's arenas: glibc gives a thread that first allocates after the
// warm-up an arena of its own, two entries).
struct MappingCount {
  size_t segments = 0;
  size_t others = 0;
};
MappingCount CountMappings() {
  std::ifstream maps("/proc/self/maps");
  MappingCount count;
  for (std::string line; std::getline(maps, line);) {
    ++(line.find(" /memfd:") != std::string::npos ? count.segments : count.others);
  }
  return count;
}

// Bytes of heap in use: the sanitizer allocator's live bytes (its quarantine excluded), else
// glibc's.
size_t HeapInUse() {
#ifdef TB_SANITIZER_HEAP
  return __sanitizer_get_current_allocated_bytes();
#else
  return mallinfo2().uordblks;
#endif
}

struct Footprint {
  size_t fds;
  MappingCount maps;
  size_t heap;
};

Footprint Measure() {
  // A directory stream holds a descriptor of its own while it counts; subtract it.
  return {CountEntries("/proc/self/fd") - 1, CountMappings(), HeapInUse()};
}

int ClientSoak(Client& client, const std::string& name, long cycles) {
  Footprint warm{};
  for (long i = 0; i < cycles; ++i) {
    if (i == cycles / 10) warm = Measure();
    auto got = client.Get(name);
    if (!got.ok()) {
      Say(absl::StrCat("error get ", got.status().ToString()));
      return 1;
    }
    TensorPtr view(*got);
    const DLTensor& t = view->dl_tensor;
    const uint64_t elements = static_cast<uint64_t>(t.shape[0]);
    if (auto bad = FirstUnstampedElement(name, static_cast<const uint64_t*>(t.data), elements)) {
      Say(absl::StrCat("corrupt ", name, " element ", *bad));
      return 1;
    }
    auto again = client.Retain(*view);
    if (!again.ok()) {
      Say(absl::StrCat("error retain ", again.status().ToString()));
      return 1;
    }
    TensorPtr second(*again);
  }
  // The releases of the last cycles are on their way; one round trip takes them.
  if (absl::Status ping = client.Ping(); !ping.ok()) {
    Say(absl::StrCat("error ping ", ping.ToString()));
    return 1;
  }
  const Footprint end = Measure();
  Say(absl::StrCat("soak cycles=", cycles, " fds=", warm.fds, "/", end.fds, " maps=",
                   warm.maps.segments, "/", end.maps.segments, " other_maps=", warm.maps.others,
                   "/", end.maps.others, " heap=", warm.heap, "/", end.heap));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string socket, role = args.empty() ? "" : args[0];
  long slot = 0, slots = 1, seed = 1;
  std::vector<std::string> positional;
  for (size_t i = 1; i < args.size(); ++i) {
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) Usage(args[i] + " needs a value");
      return args[++i];
    };
    if (args[i] == "--socket") {
      socket = value();
    } else if (args[i] == "--slot") {
      slot = std::strtol(value().c_str(), nullptr, 10);
    } else if (args[i] == "--slots") {
      slots = std::strtol(value().c_str(), nullptr, 10);
    } else if (args[i] == "--seed") {
      seed = std::strtol(value().c_str(), nullptr, 10);
    } else {
      positional.push_back(args[i]);
    }
  }
  if (socket.empty()) Usage("--socket is required");
  if (slots < 1) Usage("--slots must be at least 1");
  tensorbroker::ConnectOptions options;
  options.socket_path = socket;
  options.reconnect_timeout = std::chrono::milliseconds(0);  // the daemon never restarts here
  auto client = Client::Connect(options);
  if (!client.ok()) {
    Say(absl::StrCat("error connect ", client.status().ToString()));
    return 1;
  }
  Say("ready");
  if (role == "client-soak") {
    if (positional.size() != 2) Usage("client-soak NAME CYCLES");
    return ClientSoak(**client, positional[0], std::strtol(positional[1].c_str(), nullptr, 10));
  }
  if (role != "producer" && role != "consumer") Usage("role: producer, consumer or client-soak");
  Worker worker(*std::move(client), static_cast<uint32_t>(seed));
  return worker.Run(role == "producer", static_cast<int>(slot), static_cast<int>(slots));
}
