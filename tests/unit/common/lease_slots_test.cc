// A process's lease table (common/lease_slots.h): slots taken and given by the process's threads,
// scanned by the daemon (here: another process's marks seen through the same memfd); and the
// whole protocol of reads without a round trip on real atomics: a writer replacing a name and
// freeing each version no slot names, readers taking leases as the protocol says, and no reader
// ever holding a freed version (run under TSan in CI; tests/model/ checks every interleaving).
#include "common/lease_slots.h"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "common/directory_records.h"

namespace tensorbroker {
namespace {

// An anonymous shared mapping (MAP_SHARED survives fork) of `bytes`.
void* SharedMapping(size_t bytes) {
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return base == MAP_FAILED ? nullptr : base;
}

TEST(LeaseSlotsTest, SlotsAreTakenUntilNoneIsFreeAndGivenBack) {
  const size_t bytes = LeaseSlotsBytes(3);
  void* base = SharedMapping(bytes);
  ASSERT_NE(base, nullptr);
  ASSERT_TRUE(LeaseSlots::Format(base, bytes, 3).ok());
  ASSERT_TRUE(LeaseSlots::Check(base, bytes).ok());
  LeaseSlots table(base);
  EXPECT_EQ(table.slots(), 3u);
  EXPECT_EQ(TakesOf(base), 0u);
  auto a = table.Take(11), b = table.Take(12), c = table.Take(13);
  ASSERT_TRUE(a.has_value() && b.has_value() && c.has_value());
  EXPECT_EQ(TakesOf(base), 3u);  // each take counted; a refused one below is not
  EXPECT_EQ(std::set<uint32_t>({*a, *b, *c}).size(), 3u);
  EXPECT_FALSE(table.Take(14).has_value());  // full: the process takes the daemon's path
  EXPECT_EQ(HeldObjects(base, 3), (std::vector<uint64_t>{11, 12, 13}));
  table.Give(*b);
  EXPECT_FALSE(HoldsObject(base, 3, 12));
  EXPECT_TRUE(HoldsObject(base, 3, 13));
  auto d = table.Take(14);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(*d, *b);
  EXPECT_EQ(TakesOf(base), 4u);
  EXPECT_EQ(LeaseSlots::Check(base, 10).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LeaseSlots::Check(base, bytes - 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LeaseSlots::Format(base, bytes, 4).code(), absl::StatusCode::kInvalidArgument);
  ::munmap(base, bytes);
}

TEST(LeaseSlotsTest, ThreadsOfOneProcessNeverShareASlot) {
  constexpr uint32_t kSlots = 4;
  const size_t bytes = LeaseSlotsBytes(kSlots);
  void* base = SharedMapping(bytes);
  ASSERT_NE(base, nullptr);
  ASSERT_TRUE(LeaseSlots::Format(base, bytes, kSlots).ok());
  LeaseSlots table(base);
  const auto* slots = reinterpret_cast<const uint64_t*>(static_cast<uint8_t*>(base) + 64);
  std::vector<std::thread> threads;
  for (uint64_t t = 1; t <= 4; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t i = 0; i < 5000; ++i) {
        const uint64_t object = t << 32 | i;
        std::optional<uint32_t> slot = table.Take(object);
        if (!slot.has_value()) continue;
        EXPECT_EQ(__atomic_load_n(&slots[*slot], __ATOMIC_SEQ_CST), object);
        table.Give(*slot);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_TRUE(HeldObjects(base, kSlots).empty());
  ::munmap(base, bytes);
}

TEST(LeaseSlotsTest, AnotherProcessesMarksAreWhatTheScanSees) {
  const size_t bytes = LeaseSlotsBytes(8);
  void* base = SharedMapping(bytes);
  ASSERT_NE(base, nullptr);
  ASSERT_TRUE(LeaseSlots::Format(base, bytes, 8).ok());
  int marked[2], go[2];
  ASSERT_EQ(::pipe(marked), 0);
  ASSERT_EQ(::pipe(go), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    LeaseSlots table(base);
    const auto a = table.Take(7), b = table.Take(9);
    char byte = 1;
    if (::write(marked[1], &byte, 1) != 1 || ::read(go[0], &byte, 1) != 1) ::_exit(2);
    table.Give(*a);
    table.Give(*b);
    ::_exit(0);
  }
  char byte = 0;
  ASSERT_EQ(::read(marked[0], &byte, 1), 1);
  EXPECT_EQ(HeldObjects(base, 8), (std::vector<uint64_t>{7, 9}));
  ASSERT_EQ(::write(go[1], &byte, 1), 1);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_TRUE(HeldObjects(base, 8).empty());
  for (int fd : {marked[0], marked[1], go[0], go[1]}) ::close(fd);
  ::munmap(base, bytes);
}

// The protocol on real atomics: the writer replaces "x" kVersions times, each version's object
// id its number, and frees a replaced version once no slot names it (scanning again later for
// those some slot named); readers take leases with no round trip and check, while they hold
// one, that its version was not freed.
TEST(LeaseProtocolTest, NoReaderEverHoldsAVersionTheWriterFreed) {
  constexpr uint64_t kVersions = 20000;
  constexpr uint32_t kSlots = 8;
  const size_t directory_bytes = DirectoryBytes(16);
  void* directory = SharedMapping(directory_bytes);
  void* leases = SharedMapping(LeaseSlotsBytes(kSlots));
  ASSERT_NE(directory, nullptr);
  ASSERT_NE(leases, nullptr);
  ASSERT_TRUE(DirectoryWriter::Format(directory, directory_bytes, 16).ok());
  ASSERT_TRUE(LeaseSlots::Format(leases, LeaseSlotsBytes(kSlots), kSlots).ok());
  DirectoryWriter writer(directory, 16);
  DirectoryReader reader(directory);
  LeaseSlots table(leases);
  auto freed = std::make_unique<std::atomic<bool>[]>(kVersions + 1);
  auto entry = [](uint64_t v) {
    DirectoryEntry e;
    e.name = "x";
    e.version = v;
    e.object = v;
    return e;
  };
  ASSERT_TRUE(writer.Publish(entry(1)).ok());

  std::atomic<bool> done{false};
  std::atomic<uint64_t> held{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&] {
      while (!done.load()) {
        const DirectoryReader::Found found = reader.Find("x");
        if (found.lookup != DirectoryReader::Lookup::kFound) continue;
        const std::optional<uint32_t> slot = table.Take(found.entry.object);
        if (!slot.has_value()) continue;
        if (reader.SequenceOf(found.index) == found.sequence) {  // the lease holds
          EXPECT_FALSE(freed[found.entry.object].load()) << found.entry.object;
          held.fetch_add(1);
          EXPECT_FALSE(freed[found.entry.object].load()) << found.entry.object;
        }
        table.Give(*slot);
      }
    });
  }
  // Readers at work before the writer starts, and after it ends (a guard of 60 s on each wait).
  auto wait_for_leases = [&](uint64_t count) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (held.load() < count && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    return held.load() >= count;
  };
  EXPECT_TRUE(wait_for_leases(1));
  std::vector<uint64_t> pinned;
  auto free_unheld = [&](std::vector<uint64_t>* versions) {
    std::vector<uint64_t> still;
    for (uint64_t v : *versions) {
      if (HoldsObject(leases, kSlots, v)) {
        still.push_back(v);
      } else {
        freed[v].store(true);
      }
    }
    *versions = std::move(still);
  };
  for (uint64_t v = 2; v <= kVersions; ++v) {
    ASSERT_TRUE(writer.Publish(entry(v)).ok());  // the record first, then the scan
    pinned.push_back(v - 1);
    free_unheld(&pinned);
    if (v % 1000 == 0) {  // overlapping
      EXPECT_TRUE(wait_for_leases(held.load() + 1)) << v;
    }
  }
  EXPECT_TRUE(wait_for_leases(held.load() + 100));
  done = true;
  for (std::thread& t : readers) t.join();
  free_unheld(&pinned);
  EXPECT_TRUE(pinned.empty());  // nothing is left once the readers let go
  ::munmap(directory, directory_bytes);
  ::munmap(leases, LeaseSlotsBytes(kSlots));
}

}  // namespace
}  // namespace tensorbroker
