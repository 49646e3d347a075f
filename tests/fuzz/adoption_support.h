// What the two restart targets (tensor_record_fuzz, adoption_fuzz) share: descriptors as the
// service manager hands them to a new instance (sealed memfds holding bytes, and segments a
// previous instance made with MemfdSegment::Create), the new instance's pool, and the checks
// that must hold of whatever AdoptStoredDescriptors adopted, before and after the store takes it
// (TensorStore::AdoptPublished, then a Get) as the daemon's start does. Header-only.
#ifndef TENSORBROKER_TESTS_FUZZ_ADOPTION_SUPPORT_H_
#define TENSORBROKER_TESTS_FUZZ_ADOPTION_SUPPORT_H_

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/fd_passing.h"
#include "daemon/persistence/fd_store.h"
#include "daemon/persistence/fd_store_journal.h"

#include "absl/strings/string_view.h"
#include "daemon/memory/cpu_segment_pool.h"
#include "daemon/memory/memfd_segment.h"
#include "daemon/persistence/adoption.h"
#include "daemon/store/tensor_store.h"
#include "tests/fuzz/fuzz_support.h"

namespace tensorbroker::fuzz {

// The service manager's end of $NOTIFY_SOCKET (an abstract datagram socket of this process),
// so that FdStore::FromEnvironment() is enabled and the targets see which names adoption drops
// from the descriptor store (FDSTOREREMOVE=1). A thread reads it all the time: a datagram
// socket's queue is short, and sd_notify blocks when it is full.
class NotifyListener {
 public:
  static NotifyListener& Get() {
    static NotifyListener* listener = new NotifyListener();
    return *listener;
  }

  // The names removed since the last call (descriptors stored meanwhile are closed).
  std::vector<std::string> TakeRemoved() {
    // A mark of our own: once the reader has seen it, it has seen everything sent before it.
    const uint64_t mark = ++marks_sent_;
    FUZZ_CHECK(
        ::sendto(sender_, &mark, sizeof(mark), 0, reinterpret_cast<const sockaddr*>(&address_),
                 address_size_) == sizeof(mark),
        "sending the mark: %s", std::strerror(errno));
    std::unique_lock<std::mutex> lock(mu_);
    seen_.wait(lock, [&] { return marks_seen_ == mark; });
    return std::exchange(removed_, {});
  }

 private:
  NotifyListener() {
    const std::string name = absl::StrCat("tb-fuzz-notify-", ::getpid());
    address_.sun_family = AF_UNIX;
    std::memcpy(address_.sun_path + 1, name.data(), name.size());  // abstract: sun_path[0] = 0
    address_size_ = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
    socket_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sender_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    FUZZ_CHECK(
        socket_ >= 0 && sender_ >= 0 &&
            ::bind(socket_, reinterpret_cast<const sockaddr*>(&address_), address_size_) == 0,
        "notify socket: %s", std::strerror(errno));
    ::setenv("NOTIFY_SOCKET", ("@" + name).c_str(), 1);
    std::thread([this] { Read(); }).detach();
  }

  void Read() {
    while (true) {
      auto message = ReceiveMessage(socket_, 4096, kMaxFdsPerMessage);
      if (!message.ok()) continue;
      std::lock_guard<std::mutex> lock(mu_);
      if (message->bytes.size() == sizeof(uint64_t) && message->fds.empty()) {
        std::memcpy(&marks_seen_, message->bytes.data(), sizeof(uint64_t));
        seen_.notify_all();
      } else if (absl::StrContains(message->bytes, "FDSTOREREMOVE=1")) {
        const size_t at = message->bytes.find("FDNAME=");
        if (at != std::string::npos) {
          removed_.push_back(message->bytes.substr(at + 7, message->bytes.find('\n', at) - at - 7));
        }
      }
    }
  }

  sockaddr_un address_{};
  socklen_t address_size_ = 0;
  int socket_ = -1;
  int sender_ = -1;
  uint64_t marks_sent_ = 0;
  std::mutex mu_;
  std::condition_variable seen_;
  uint64_t marks_seen_ = 0;           // guarded by mu_
  std::vector<std::string> removed_;  // guarded by mu_
};

// The descriptor store the daemon sees under systemd (NotifyListener's), and the journal its
// CPU pool reports to.
inline const daemon::FdStore& ServiceManagerStore() {
  NotifyListener::Get();
  static const daemon::FdStore store = daemon::FdStore::FromEnvironment();
  FUZZ_CHECK(store.enabled(), "the descriptor store is not enabled");
  return store;
}
inline daemon::FdStoreJournal* ServiceManagerJournal() {
  static daemon::FdStoreJournal* journal = new daemon::FdStoreJournal(ServiceManagerStore());
  return journal;
}

// The previous instance's segments: "tb-old-0" (64 KiB) and "tb-old-1" (16 KiB), made once.
inline const daemon::MemfdSegment& OldSegment(int which) {
  static const daemon::MemfdSegment* segments[2] = {
      new daemon::MemfdSegment(*daemon::MemfdSegment::Create("tb-old-0", 64 << 10)),
      new daemon::MemfdSegment(*daemon::MemfdSegment::Create("tb-old-1", 16 << 10))};
  return *segments[which & 1];
}

// A descriptor of that segment, as the service manager hands back what was stored.
inline UniqueFd SegmentDescriptor(int which) {
  return UniqueFd(::fcntl(OldSegment(which).read_write_fd(), F_DUPFD_CLOEXEC, 0));
}

// A memfd holding `bytes`, sealed against write, shrink and grow unless `sealed` is false.
inline UniqueFd RecordDescriptor(absl::string_view bytes, bool sealed = true) {
  UniqueFd fd(::memfd_create("tb-record", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  FUZZ_CHECK(fd.valid(), "memfd_create");
  FUZZ_CHECK(
      ::pwrite(fd.get(), bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size()),
      "pwrite");
  if (sealed) {
    FUZZ_CHECK(::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW) == 0,
               "F_ADD_SEALS");
  }
  return fd;
}

// The new instance's CPU pool, as the daemon makes it (a prefix of its own).
inline std::unique_ptr<daemon::CpuSegmentPool> NewPool() {
  daemon::CpuSegmentPoolOptions options;
  options.capacity_bytes = 4 << 20;
  options.name_prefix = "tb-new-";
  options.pooled_segment_bytes = 64 << 10;
  options.dedicated_threshold = 32 << 10;
  options.journal = ServiceManagerJournal();
  return std::make_unique<daemon::CpuSegmentPool>(options);
}

// Checks what was adopted from the segments named in `handed_segments` (name -> size), then
// gives it to a store on `pool` and reads every tensor back with a Get.
// `removed`: the names adoption dropped from the descriptor store (NotifyListener): none may
// be one that an adopted tensor needs at the next start, its record's or its segment's.
inline void CheckAdopted(daemon::Adoption adoption,
                         const std::map<std::string, uint64_t>& handed_segments,
                         std::unique_ptr<daemon::CpuSegmentPool> pool,
                         const std::vector<std::string>& removed) {
  const std::set<std::string> dropped(removed.begin(), removed.end());
  for (const auto& tensor : adoption.tensors) {
    const std::string record = daemon::RecordFdName(tensor.version);
    const std::string segment = daemon::SegmentFdName(tensor.block.segment);
    FUZZ_CHECK(dropped.count(record) == 0 && dropped.count(segment) == 0,
               "adopted '%s' but dropped %s from the descriptor store", tensor.spec.name.c_str(),
               dropped.count(record) != 0 ? record.c_str() : segment.c_str());
  }
  std::set<std::string> names;
  std::map<std::string, std::map<uint64_t, uint64_t>> blocks;  // segment -> offset -> end
  std::set<std::string> segments;
  uint64_t bytes = 0;
  for (const auto& tensor : adoption.tensors) {
    FUZZ_CHECK(names.insert(tensor.spec.name).second, "'%s' adopted twice",
               tensor.spec.name.c_str());
    FUZZ_CHECK(tensor.version > 0, "version 0 adopted");
    const daemon::Block& block = tensor.block;
    auto segment = handed_segments.find(block.segment);
    FUZZ_CHECK(segment != handed_segments.end(), "block in '%s', which was not handed over",
               block.segment.c_str());
    FUZZ_CHECK(block.offset <= segment->second && block.size <= segment->second - block.offset &&
                   tensor.spec.nbytes <= block.size && block.segment_size == segment->second &&
                   block.data != nullptr,
               "block [%llu, +%llu) of %llu bytes in a %llu-byte segment holds a %llu-byte tensor",
               static_cast<unsigned long long>(block.offset),
               static_cast<unsigned long long>(block.size),
               static_cast<unsigned long long>(block.segment_size),
               static_cast<unsigned long long>(segment->second),
               static_cast<unsigned long long>(tensor.spec.nbytes));
    segments.insert(block.segment);
    auto& taken = blocks[block.segment];
    auto next = taken.lower_bound(block.offset);
    FUZZ_CHECK(next == taken.end() || next->first >= block.offset + block.size, "blocks overlap");
    FUZZ_CHECK(next == taken.begin() || std::prev(next)->second <= block.offset, "blocks overlap");
    if (block.size > 0) taken.emplace(block.offset, block.offset + block.size);
    bytes += tensor.spec.nbytes;
  }
  FUZZ_CHECK(bytes == adoption.bytes, "Adoption::bytes");
  FUZZ_CHECK(adoption.segments == segments.size(), "Adoption::segments %zu, expected %zu",
             adoption.segments, segments.size());

  daemon::TensorStore store(std::move(pool));
  const daemon::Principal root{0, {0}, true, {}};
  for (daemon::TensorStore::AdoptedTensor& tensor : adoption.tensors) {
    const daemon::TensorSpec spec = tensor.spec;
    absl::Status taken = store.AdoptPublished(std::move(tensor));
    FUZZ_CHECK(taken.ok(), "the store refused an adopted tensor: %s",
               std::string(taken.message()).c_str());
    const std::string session = store.OpenSession(root, 1, "fuzz", nullptr);
    auto grant = store.Get(session, spec.name, absl::InfinitePast());
    FUZZ_CHECK(grant.ok(), "Get of adopted '%s': %s", spec.name.c_str(),
               std::string(grant.status().message()).c_str());
    FUZZ_CHECK(grant->info.nbytes == spec.nbytes && grant->info.shape == spec.shape,
               "Get of adopted '%s' answers another tensor", spec.name.c_str());
    store.CloseSession(session);
  }
}

}  // namespace tensorbroker::fuzz

#endif  // TENSORBROKER_TESTS_FUZZ_ADOPTION_SUPPORT_H_
