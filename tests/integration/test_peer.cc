// tensorbroker_test_peer: the second process of the integration tests. The tests fork+exec it
// with a role; it talks to the daemon through the real client library and reports on stdout,
// one line per step, so the test can assert exact outcomes in another address space.
//
//   get NAME [--expect-fill F] [--wait-ms N]  Get; print "got ... hash=H"; exit 3 on a fill
//                                             mismatch (float32 tensors)
//   maps NAME                                 Get; print "map path=P offset=O perms=R ..." for
//                                             the /proc/self/maps line holding the data pointer
//   write-mutable NAME IDX VALUE              Get a mutable float32 tensor, write [IDX]=VALUE
//   read-float NAME IDX                       Get a float32 tensor, print "value V"
//   serve NAME                                Get once, then obey stdin: "w IDX V" writes,
//                                             "r IDX" prints "value V"; exits at stdin EOF
//   write-sealed NAME                         Get and write through the pointer (must fault)
//   hold NAME... [--count K] [--legacy]       Get every NAME K times (GetLegacy with --legacy),
//                                             Ping, print "held"; on stdin "release" run the
//                                             deleters, Ping (the releases arrive) and print
//                                             "released"
//   create-hold NAME NBYTES                   Create (uint8 [NBYTES]) without sealing, print
//                                             "created"; on stdin "seal" seal it; exit at EOF
//   session                                   Connect, print "connected", exit at stdin EOF
//   watch PREFIX                              Watch from now, print "watching"; on each
//                                             stdin line print the next event as
//                                             "event KIND SEQUENCE NAME VERSION"
//   stream-read NAME                          StreamReader: print "reading", then follow
//                                             int64 frames until the writer closes and print
//                                             "frames F skipped S last L torn T unordered U"
//                                             (torn: a word differs from the sequence)
//   stream-hold NAME                          StreamReader: take one frame, print "held SEQ";
//                                             exit at stdin EOF
//   follow NAME --count LAST                  Get NAME (uint64, stamped_tensor.h) again and
//                                             again, checking every element, releasing each,
//                                             until its stamp is LAST; print "followed GETS
//                                             VERSIONS torn T backwards B", then "idle" and
//                                             wait for stdin EOF (holding nothing)
// Every role takes --socket PATH. A failed call prints "error CODE message" and exits 4; bad
// usage exits 2.
#include <dlpack/dlpack.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tensorbroker/client.h"
#include "tensorbroker/stream.h"
#include "tests/integration/peer_output.h"
#include "tests/integration/shm_inspect.h"
#include "tests/integration/stamped_tensor.h"

namespace {

using tensorbroker::Client;
using tensorbroker::testing::FileOffsetOf;
using tensorbroker::testing::FindMapping;
using tensorbroker::testing::HashBytes;

using tensorbroker::testing::Say;

using tensorbroker::testing::Fail;

[[noreturn]] void Usage(const std::string& why) {
  tensorbroker::testing::UsageError("tensorbroker_test_peer", why);
}

struct Args {
  std::string role;
  std::vector<std::string> positional;
  std::string socket;
  bool has_fill = false;
  float fill = 0;
  int64_t wait_ms = 0;
  int count = 1;
  bool legacy = false;
};

Args ParseArgs(int argc, char** argv) {
  Args a;
  if (argc < 2) Usage("no role");
  a.role = argv[1];
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) Usage(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--socket") {
      a.socket = value();
    } else if (arg == "--expect-fill") {
      a.has_fill = true;
      a.fill = std::strtof(value().c_str(), nullptr);
    } else if (arg == "--wait-ms") {
      a.wait_ms = std::strtoll(value().c_str(), nullptr, 10);
    } else if (arg == "--count") {
      a.count = std::atoi(value().c_str());
    } else if (arg == "--legacy") {
      a.legacy = true;
    } else {
      a.positional.push_back(arg);
    }
  }
  if (a.socket.empty()) Usage("--socket is required");
  return a;
}

std::unique_ptr<Client> ConnectOrDie(const Args& a) {
  auto client = Client::Connect(a.socket);
  if (!client.ok()) Fail(client.status());
  return *std::move(client);
}

DLManagedTensorVersioned* GetOrDie(Client& client, const std::string& name, int64_t wait_ms = 0) {
  auto t = client.Get(name, std::chrono::milliseconds(wait_ms));
  if (!t.ok()) Fail(t.status());
  return *t;
}

uint8_t* DataOf(const DLTensor& t) { return static_cast<uint8_t*>(t.data) + t.byte_offset; }

uint64_t NumBytes(const DLTensor& t) {
  uint64_t n = (t.dtype.bits + 7) / 8;
  for (int i = 0; i < t.ndim; ++i) n *= static_cast<uint64_t>(t.shape[i]);
  return n;
}

float* FloatAt(DLManagedTensorVersioned* t, const std::string& index) {
  const DLTensor& d = t->dl_tensor;
  if (d.dtype.code != kDLFloat || d.dtype.bits != 32) Usage("not a float32 tensor");
  const uint64_t i = std::strtoull(index.c_str(), nullptr, 10);
  if (i >= NumBytes(d) / 4) Usage("index out of range");
  return reinterpret_cast<float*>(DataOf(d)) + i;
}

std::string FloatText(float v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.9g", static_cast<double>(v));
  return buf;
}

int RoleGet(const Args& a) {
  if (a.positional.size() != 1) Usage("get NAME");
  auto client = ConnectOrDie(a);
  DLManagedTensorVersioned* t = GetOrDie(*client, a.positional[0], a.wait_ms);
  const DLTensor& d = t->dl_tensor;
  std::vector<int64_t> shape(d.shape, d.shape + d.ndim);
  std::vector<int64_t> strides;
  if (d.strides != nullptr) strides.assign(d.strides, d.strides + d.ndim);
  const uint64_t nbytes = NumBytes(d);
  Say(absl::StrCat("got code=", d.dtype.code, " bits=", d.dtype.bits, " ndim=", d.ndim,
                   " shape=", absl::StrJoin(shape, ","), " strides=", absl::StrJoin(strides, ","),
                   " nbytes=", nbytes, " hash=", HashBytes(DataOf(d), nbytes),
                   " readonly=", (t->flags & DLPACK_FLAG_BITMASK_READ_ONLY) ? 1 : 0,
                   " aligned=", reinterpret_cast<uintptr_t>(d.data) % 256 == 0 ? 1 : 0));
  int rc = 0;
  if (a.has_fill) {
    if (d.dtype.code != kDLFloat || d.dtype.bits != 32) Usage("--expect-fill needs float32");
    const float* f = reinterpret_cast<const float*>(DataOf(d));
    for (uint64_t i = 0; i < nbytes / 4; ++i) {
      if (f[i] != a.fill) {
        Say(absl::StrCat("mismatch index=", i, " value=", FloatText(f[i])));
        rc = 3;
        break;
      }
    }
  }
  t->deleter(t);
  return rc;
}

int RoleMaps(const Args& a) {
  if (a.positional.size() != 1) Usage("maps NAME");
  auto client = ConnectOrDie(a);
  DLManagedTensorVersioned* t = GetOrDie(*client, a.positional[0]);
  const uintptr_t p = reinterpret_cast<uintptr_t>(DataOf(t->dl_tensor));
  auto m = FindMapping(p);
  if (!m.ok()) Fail(m.status());
  Say(absl::StrCat("map path=", m->path, " offset=", FileOffsetOf(*m, p), " perms=", m->perms,
                   " deleted=", m->deleted ? 1 : 0, " inode=", m->inode,
                   " aligned=", reinterpret_cast<uintptr_t>(t->dl_tensor.data) % 256 == 0 ? 1 : 0,
                   " readonly=", (t->flags & DLPACK_FLAG_BITMASK_READ_ONLY) ? 1 : 0,
                   " hash=", HashBytes(DataOf(t->dl_tensor), NumBytes(t->dl_tensor))));
  t->deleter(t);
  return 0;
}

int RoleWriteMutable(const Args& a) {
  if (a.positional.size() != 3) Usage("write-mutable NAME IDX VALUE");
  auto client = ConnectOrDie(a);
  DLManagedTensorVersioned* t = GetOrDie(*client, a.positional[0]);
  *FloatAt(t, a.positional[1]) = std::strtof(a.positional[2].c_str(), nullptr);
  Say("written");
  t->deleter(t);
  return 0;
}

int RoleReadFloat(const Args& a) {
  if (a.positional.size() != 2) Usage("read-float NAME IDX");
  auto client = ConnectOrDie(a);
  DLManagedTensorVersioned* t = GetOrDie(*client, a.positional[0]);
  Say(absl::StrCat("value ", FloatText(*FloatAt(t, a.positional[1]))));
  t->deleter(t);
  return 0;
}

int RoleServe(const Args& a) {
  if (a.positional.size() != 1) Usage("serve NAME");
  auto client = ConnectOrDie(a);
  DLManagedTensorVersioned* t = GetOrDie(*client, a.positional[0]);
  Say(absl::StrCat("ready readonly=", (t->flags & DLPACK_FLAG_BITMASK_READ_ONLY) ? 1 : 0));
  std::string cmd;
  while (std::cin >> cmd) {
    if (cmd == "w") {
      std::string idx, value;
      std::cin >> idx >> value;
      *FloatAt(t, idx) = std::strtof(value.c_str(), nullptr);
      Say("ok");
    } else if (cmd == "r") {
      std::string idx;
      std::cin >> idx;
      Say(absl::StrCat("value ", FloatText(*FloatAt(t, idx))));
    } else {
      Usage("serve: unknown command " + cmd);
    }
  }
  t->deleter(t);
  return 0;
}

}  // namespace

// The write-sealed role faults on purpose and the tests expect the kernel's SIGSEGV, so the
// sanitizers (in ASan/TSan builds) must not turn it into a report and an abort. Unused in
// ordinary builds.
extern "C" __attribute__((used)) const char* __asan_default_options() {
  return "handle_segv=0:handle_sigbus=0";
}
extern "C" __attribute__((used)) const char* __tsan_default_options() {
  return "handle_segv=0:handle_sigbus=0";
}

namespace {

int RoleWriteSealed(const Args& a) {
  if (a.positional.size() != 1) Usage("write-sealed NAME");
  auto client = ConnectOrDie(a);
  DLManagedTensorVersioned* t = GetOrDie(*client, a.positional[0]);
  Say("writing");
  volatile uint8_t* p = DataOf(t->dl_tensor);
  *p = static_cast<uint8_t>(*p + 1);  // must fault: sealed tensors are mapped read-only
  Say("wrote");
  t->deleter(t);
  return 0;
}

int RoleHold(const Args& a) {
  if (a.positional.empty()) Usage("hold NAME...");
  auto client = ConnectOrDie(a);
  std::vector<DLManagedTensorVersioned*> held;
  std::vector<DLManagedTensor*> held_legacy;
  for (const std::string& name : a.positional) {
    for (int i = 0; i < a.count; ++i) {
      if (a.legacy) {
        auto t = client->GetLegacy(name);
        if (!t.ok()) Fail(t.status());
        held_legacy.push_back(*t);
      } else {
        held.push_back(GetOrDie(*client, name));
      }
    }
  }
  // Gets of a version already held give their own lease back (queued): make sure it arrived.
  if (absl::Status s = client->Ping(); !s.ok()) Fail(s);
  Say("held");
  std::string cmd;
  auto release = [&] {
    for (auto* t : held) t->deleter(t);
    for (auto* t : held_legacy) t->deleter(t);
    held.clear();
    held_legacy.clear();
  };
  while (std::getline(std::cin, cmd)) {
    if (cmd == "release") {
      release();
      if (absl::Status s = client->Ping(); !s.ok()) Fail(s);  // the releases have arrived
      Say("released");
    }
  }
  release();
  return 0;
}

int RoleCreateHold(const Args& a) {
  if (a.positional.size() != 2) Usage("create-hold NAME NBYTES");
  auto client = ConnectOrDie(a);
  const int64_t n = std::strtoll(a.positional[1].c_str(), nullptr, 10);
  auto t = client->Create(a.positional[0], {n}, tensorbroker::dtypes::kUInt8);
  if (!t.ok()) Fail(t.status());
  std::memset(DataOf((*t)->dl_tensor), 0x5a, static_cast<size_t>(n));
  Say("created");
  std::string cmd;
  while (std::getline(std::cin, cmd)) {
    if (cmd == "seal") {
      auto info = client->Seal(a.positional[0]);
      if (!info.ok()) Fail(info.status());
      Say(absl::StrCat("sealed version=", info->version));
    }
  }
  (*t)->deleter(*t);
  return 0;
}

int RoleSession(const Args& a) {
  auto client = ConnectOrDie(a);
  if (absl::Status s = client->Ping(); !s.ok()) Fail(s);
  Say("connected");
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  return 0;
}

int RoleWatch(const Args& a) {
  if (a.positional.size() != 1) Usage("watch PREFIX");
  auto client = ConnectOrDie(a);
  auto watcher = client->Watch(a.positional[0]);
  if (!watcher.ok()) Fail(watcher.status());
  Say("watching");
  std::string line;
  while (std::getline(std::cin, line)) {
    auto event = (*watcher)->Next(std::chrono::seconds(30));
    if (!event.ok()) Fail(event.status());
    if (!event->has_value()) Fail(absl::DeadlineExceededError("no event within 30 s"));
    const tensorbroker::WatchEvent& e = **event;
    Say(absl::StrCat("event ", tensorbroker::WatchEventKindName(e.kind), " ", e.sequence, " ",
                     e.name, " ", e.version));
  }
  return 0;
}

std::unique_ptr<tensorbroker::StreamReader> OpenReaderOrDie(Client& client,
                                                            const std::string& name) {
  auto reader = tensorbroker::StreamReader::Open(client, name, std::chrono::seconds(30));
  if (!reader.ok()) Fail(reader.status());
  return *std::move(reader);
}

int RoleStreamRead(const Args& a) {
  if (a.positional.size() != 1) Usage("stream-read NAME");
  auto client = ConnectOrDie(a);
  auto reader = OpenReaderOrDie(*client, a.positional[0]);
  Say("reading");
  uint64_t frames = 0, skipped = 0, last = 0, torn = 0, unordered = 0;
  while (true) {
    auto next = reader->Next(std::chrono::seconds(30));
    if (absl::IsOutOfRange(next.status())) break;
    if (!next.ok()) Fail(next.status());
    if (!next->has_value()) Fail(absl::DeadlineExceededError("no frame within 30 s"));
    const tensorbroker::StreamFrame& frame = **next;
    const DLTensor& d = frame.tensor->dl_tensor;
    const auto* words = reinterpret_cast<const int64_t*>(DataOf(d));
    for (uint64_t i = 0; i < NumBytes(d) / 8; ++i) {
      if (static_cast<uint64_t>(words[i]) != frame.sequence) {
        ++torn;
        break;
      }
    }
    if (frame.sequence <= last) ++unordered;
    last = frame.sequence;
    ++frames;
    skipped += frame.skipped;
  }
  Say(absl::StrCat("frames ", frames, " skipped ", skipped, " last ", last, " torn ", torn,
                   " unordered ", unordered));
  return 0;
}

int RoleStreamHold(const Args& a) {
  if (a.positional.size() != 1) Usage("stream-hold NAME");
  auto client = ConnectOrDie(a);
  auto reader = OpenReaderOrDie(*client, a.positional[0]);
  auto next = reader->Next(std::chrono::seconds(30));
  if (!next.ok()) Fail(next.status());
  if (!next->has_value()) Fail(absl::DeadlineExceededError("no frame within 30 s"));
  Say(absl::StrCat("held ", (*next)->sequence));
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  return 0;
}

int RoleFollow(const Args& a) {
  if (a.positional.size() != 1) Usage("follow NAME --count LAST");
  const std::string& name = a.positional[0];
  auto client = ConnectOrDie(a);
  uint64_t gets = 0, versions = 0, torn = 0, backwards = 0, last_version = 0;
  while (true) {
    DLManagedTensorVersioned* t = GetOrDie(*client, name, 60000);
    ++gets;
    const DLTensor& d = t->dl_tensor;
    const uint64_t elements = NumBytes(d) / 8;
    const auto* values = reinterpret_cast<const uint64_t*>(DataOf(d));
    if (d.dtype.bits != 64 ||
        tensorbroker::testing::FirstUnstampedElement(name, values, elements).has_value()) {
      ++torn;
    }
    auto info = client->Describe(*t);
    if (!info.ok()) Fail(info.status());
    if (info->version < last_version) ++backwards;
    if (info->version != last_version) ++versions;
    last_version = info->version;
    const uint64_t stamp = elements >= 2 ? values[1] : 0;
    t->deleter(t);
    if (stamp == static_cast<uint64_t>(a.count)) break;
  }
  Say(absl::StrCat("followed ", gets, " ", versions, " torn ", torn, " backwards ", backwards));
  if (absl::Status s = client->Ping(); !s.ok()) Fail(s);  // releases queued for the daemon: sent
  Say("idle");
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = ParseArgs(argc, argv);
  if (a.role == "get") return RoleGet(a);
  if (a.role == "maps") return RoleMaps(a);
  if (a.role == "write-mutable") return RoleWriteMutable(a);
  if (a.role == "read-float") return RoleReadFloat(a);
  if (a.role == "serve") return RoleServe(a);
  if (a.role == "write-sealed") return RoleWriteSealed(a);
  if (a.role == "hold") return RoleHold(a);
  if (a.role == "follow") return RoleFollow(a);
  if (a.role == "create-hold") return RoleCreateHold(a);
  if (a.role == "session") return RoleSession(a);
  if (a.role == "watch") return RoleWatch(a);
  if (a.role == "stream-read") return RoleStreamRead(a);
  if (a.role == "stream-hold") return RoleStreamHold(a);
  Usage("unknown role " + a.role);
}
