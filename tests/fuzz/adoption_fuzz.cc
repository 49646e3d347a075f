// Feeds: the descriptors a new instance is handed at start, by name and content, to
// AdoptStoredDescriptors (daemon/persistence/adoption.h) — what the daemon does with the names
// sd_listen_fds_with_names gives it ($LISTEN_FDNAMES itself is libsystemd's to parse). The
// input is frames (fuzz_support.h), one per descriptor: a kind byte (low two bits: 0 a sealed
// memfd, 1 a segment of the previous instance — bit 2 picks which —, 2 an unsealed memfd, 3 a
// pipe), a name length byte and the name, then the memfd's content. Then, as the daemon's start
// does, the store takes what was adopted (TensorStore::AdoptPublished) and a Get reads it.
// Asserts: descriptors named neither "s-...", "g-..." nor "r-..." come back untouched, in order;
// each record descriptor ends adopted or dropped, never both; nothing an adopted tensor needs at
// the next start (its record's name, its segment's) is dropped from the descriptor store (seen on a
// $NOTIFY_SOCKET of our own); adopted tensors have distinct names, lie inside segments that
// were handed over, and do not overlap; the store accepts every one and a Get returns it
// (adoption_support.h).
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "daemon/persistence/adoption.h"
#include "daemon/persistence/fd_store.h"
#include "tests/fuzz/adoption_support.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/quiet_daemon_logs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tensorbroker;
  using namespace tensorbroker::daemon;
  fuzz::ServiceManagerStore();
  (void)fuzz::NotifyListener::Get().TakeRemoved();  // whatever came after the last input
  fuzz::FrameReader input(data, size);
  std::vector<NamedFd> handed;
  std::vector<std::string> others;  // names neither a segment nor a record, in order
  size_t records = 0;
  std::map<std::string, uint64_t> segments;  // the segments handed over under their own name
  while (!input.done() && handed.size() < 64) {
    absl::string_view frame = input.Frame();
    if (frame.size() < 2) continue;
    const uint8_t kind = static_cast<uint8_t>(frame[0]);
    const size_t name_length = static_cast<uint8_t>(frame[1]);
    frame.remove_prefix(2);
    const std::string name(frame.substr(0, name_length));
    const absl::string_view content = frame.substr(std::min(name_length, frame.size()));
    UniqueFd fd;
    switch (kind & 3) {
      case 0:
        fd = fuzz::RecordDescriptor(content);
        break;
      case 1: {
        const int which = (kind >> 2) & 1;
        fd = fuzz::SegmentDescriptor(which);
        // Adopted under the name it is handed with, whatever it was called before.
        if (absl::StartsWith(name, "s-")) {
          segments.emplace(name.substr(2), fuzz::OldSegment(which).size());
        }
        break;
      }
      case 2:
        fd = fuzz::RecordDescriptor(content, /*sealed=*/false);
        break;
      default: {
        int pipe[2];
        FUZZ_CHECK(::pipe2(pipe, O_CLOEXEC) == 0, "pipe2");
        ::close(pipe[1]);
        fd = UniqueFd(pipe[0]);
      }
    }
    if (absl::StartsWith(name, "r-")) {
      ++records;
    } else if (!absl::StartsWith(name, "s-") && !absl::StartsWith(name, "g-")) {
      others.push_back(name);  // segments ("s-") and CUDA slabs ("g-") are adoption's own
    }
    handed.push_back({name, std::move(fd)});
  }

  auto pool = fuzz::NewPool();
  Adoption adoption =
      AdoptStoredDescriptors(std::move(handed), {pool.get()}, fuzz::ServiceManagerStore());
  const std::vector<std::string> removed = fuzz::NotifyListener::Get().TakeRemoved();
  FUZZ_CHECK(adoption.others.size() == others.size(), "%zu others back of %zu",
             adoption.others.size(), others.size());
  for (size_t i = 0; i < others.size(); ++i) {
    FUZZ_CHECK(adoption.others[i].name == others[i] && adoption.others[i].fd.valid(),
               "other descriptor %zu changed", i);
  }
  FUZZ_CHECK(adoption.tensors.size() + adoption.records_dropped == records,
             "%zu adopted + %zu dropped of %zu records", adoption.tensors.size(),
             adoption.records_dropped, records);
  fuzz::CheckAdopted(std::move(adoption), segments, std::move(pool), removed);
  return 0;
}
