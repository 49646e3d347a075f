// CpuSegmentPool on real memfd segments: pooling, dedicated segments, owners kept apart,
// mutable segments never reused, alignment, capacity, removal, and what the kernel enforces on
// every segment (sealed size, mode 0600, a read-only descriptor that cannot be made writable).
#include "daemon/memory/cpu_segment_pool.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tensorbroker::daemon {
namespace {

const std::string kAlice = "1000/*";
const std::string kBob = "1001/*";

// Files in /dev/shm whose names start with `prefix`.
int DevShmEntries(const std::string& prefix) {
  int count = 0;
  if (DIR* dir = ::opendir("/dev/shm")) {
    while (dirent* entry = ::readdir(dir)) count += absl::StartsWith(entry->d_name, prefix);
    ::closedir(dir);
  }
  return count;
}

class CpuSegmentPoolTest : public ::testing::Test {
 protected:
  CpuSegmentPoolOptions Options(uint64_t capacity) {
    CpuSegmentPoolOptions options;
    options.capacity_bytes = capacity;
    options.name_prefix = prefix_;
    options.pooled_segment_bytes = 1 << 20;
    options.dedicated_threshold = 256 << 10;
    return options;
  }
  void TearDown() override { EXPECT_EQ(DevShmEntries(prefix_), 0) << "nothing is named"; }
  const std::string prefix_ = absl::StrCat("tb-unittest-", ::getpid(), "-");
};

TEST_F(CpuSegmentPoolTest, SmallBlocksShareAlignedPooledSegment) {
  CpuSegmentPool pool(Options(8 << 20));
  std::vector<std::string> removed;
  auto a = pool.Allocate(10, BlockKind::kImmutable, kAlice, &removed);
  auto b = pool.Allocate(1000, BlockKind::kImmutable, kAlice, &removed);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->segment, b->segment);
  EXPECT_EQ(a->segment_size, 1u << 20);
  EXPECT_EQ(a->offset % 256, 0u);
  EXPECT_EQ(b->offset % 256, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data) % 256, 0u);
  EXPECT_EQ(a->read_write_fd, b->read_write_fd);
  // The daemon's mapping is writable and shared with the descriptor's file.
  b->data[0] = 7;
  uint8_t byte = 0;
  ASSERT_EQ(::pread(b->read_only_fd, &byte, 1, static_cast<off_t>(b->offset)), 1);
  EXPECT_EQ(byte, 7);
  EXPECT_EQ(pool.Stats().used_bytes, 256u + 1024u);
  EXPECT_EQ(pool.Stats().segments, 1u);
  pool.Free(*a, &removed);
  pool.Free(*b, &removed);
  EXPECT_TRUE(removed.empty());  // one idle pooled segment is kept for reuse
  EXPECT_EQ(pool.Stats().used_bytes, 0u);
}

TEST_F(CpuSegmentPoolTest, TheKernelEnforcesSizeModeAndReadOnly) {
  CpuSegmentPool pool(Options(8 << 20));
  std::vector<std::string> removed;
  auto a = pool.Allocate(10, BlockKind::kImmutable, kAlice, &removed);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(::fcntl(a->read_write_fd, F_GET_SEALS), F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  EXPECT_EQ(::ftruncate(a->read_write_fd, 0), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(::fallocate(a->read_write_fd, 0, 0, static_cast<off_t>(a->segment_size) + 4096), -1);
  EXPECT_EQ(errno, EPERM);
  struct stat st;
  ASSERT_EQ(::fstat(a->read_only_fd, &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), a->segment_size);
  EXPECT_EQ(::fcntl(a->read_only_fd, F_GETFL) & O_ACCMODE, O_RDONLY);
  EXPECT_EQ(::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, a->read_only_fd, 0),
            MAP_FAILED);
  EXPECT_EQ(errno, EACCES);
  void* view = ::mmap(nullptr, 4096, PROT_READ, MAP_SHARED, a->read_only_fd, 0);
  ASSERT_NE(view, MAP_FAILED);
  EXPECT_EQ(::mprotect(view, 4096, PROT_READ | PROT_WRITE), -1);
  EXPECT_EQ(errno, EACCES);
  ::munmap(view, 4096);
  pool.Free(*a, &removed);
}

TEST_F(CpuSegmentPoolTest, OwnersNeverShareASegment) {
  CpuSegmentPool pool(Options(8 << 20));
  std::vector<std::string> removed;
  auto alice = pool.Allocate(10, BlockKind::kImmutable, kAlice, &removed);
  auto bob = pool.Allocate(10, BlockKind::kImmutable, kBob, &removed);
  auto big_alice = pool.Allocate(600 << 10, BlockKind::kImmutable, kAlice, &removed);
  ASSERT_TRUE(alice.ok() && bob.ok() && big_alice.ok());
  EXPECT_NE(alice->segment, bob->segment);
  pool.Free(*big_alice, &removed);  // idle, kept for Alice only
  auto big_bob = pool.Allocate(600 << 10, BlockKind::kImmutable, kBob, &removed);
  ASSERT_TRUE(big_bob.ok());
  EXPECT_NE(big_bob->segment, big_alice->segment);
  for (const auto* block : {&*alice, &*bob, &*big_bob}) pool.Free(*block, &removed);
}

TEST_F(CpuSegmentPoolTest, EveryMutableBlockHasASegmentRemovedWithIt) {
  CpuSegmentPool pool(Options(8 << 20));
  std::vector<std::string> removed;
  auto a = pool.Allocate(10, BlockKind::kImmutable, kAlice, &removed);
  auto m1 = pool.Allocate(10, BlockKind::kMutable, kAlice, &removed);
  auto m2 = pool.Allocate(10, BlockKind::kMutable, kAlice, &removed);
  ASSERT_TRUE(a.ok() && m1.ok() && m2.ok());
  EXPECT_NE(a->segment, m1->segment);
  EXPECT_NE(m1->segment, m2->segment);
  EXPECT_EQ(m1->segment_size, static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)));
  pool.Free(*m1, &removed);
  EXPECT_EQ(removed, std::vector<std::string>{m1->segment});
  auto m3 = pool.Allocate(10, BlockKind::kMutable, kAlice, &removed);
  ASSERT_TRUE(m3.ok());
  EXPECT_NE(m3->segment, m1->segment);
  pool.Free(*a, &removed);
  pool.Free(*m2, &removed);
  pool.Free(*m3, &removed);
}

// Freeing the last block of a segment that goes with it (a mutable one) while an idle segment
// comes after it: the idle one is judged by what the removed one was, not by its freed memory
// (a heap-use-after-free under ASan, found by tests/fuzz/local_channel_fuzz).
TEST_F(CpuSegmentPoolTest, ASegmentRemovedBeforeAnIdleOneLeavesTheIdleOneKept) {
  CpuSegmentPool pool(Options(8 << 20));
  std::vector<std::string> removed;
  auto mutable_block = pool.Allocate(64, BlockKind::kMutable, kAlice, &removed);  // segment 0
  auto pooled = pool.Allocate(64, BlockKind::kImmutable, kAlice, &removed);       // segment 1
  ASSERT_TRUE(mutable_block.ok() && pooled.ok());
  ASSERT_LT(mutable_block->segment, pooled->segment);  // visited first by the removal
  pool.Free(*pooled, &removed);                        // idle, kept for reuse
  pool.Free(*mutable_block, &removed);                 // removed, then segment 1 is judged
  EXPECT_EQ(removed, std::vector<std::string>{mutable_block->segment});
  EXPECT_EQ(pool.Stats().segments, 1u);
  auto again = pool.Allocate(64, BlockKind::kImmutable, kAlice, &removed);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->segment, pooled->segment);
}

TEST_F(CpuSegmentPoolTest, LargeBlocksGetTheirOwnSegmentKeptIdleForReuse) {
  CpuSegmentPool pool(Options(8 << 20));
  std::vector<std::string> removed;
  auto big = pool.Allocate(600 << 10, BlockKind::kImmutable, kAlice, &removed);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->offset, 0u);
  EXPECT_EQ(big->segment_size, 600u << 10);
  pool.Free(*big, &removed);
  EXPECT_TRUE(removed.empty());  // idle, kept for the next tensor of about that size
  auto again = pool.Allocate(590 << 10, BlockKind::kImmutable, kAlice, &removed);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->segment, big->segment);
  pool.Free(*again, &removed);
  // Less than half of it: a fresh segment; the mutable kind never reuses an immutable one.
  auto smaller = pool.Allocate(280 << 10, BlockKind::kImmutable, kAlice, &removed);
  auto other_kind = pool.Allocate(600 << 10, BlockKind::kMutable, kAlice, &removed);
  ASSERT_TRUE(smaller.ok() && other_kind.ok());
  EXPECT_NE(smaller->segment, big->segment);
  EXPECT_NE(other_kind->segment, big->segment);
  pool.Free(*smaller, &removed);  // replaces the older idle dedicated segment
  EXPECT_EQ(removed, std::vector<std::string>{big->segment});
  EXPECT_EQ(pool.Stats().segments, 2u);
  pool.Free(*other_kind, &removed);
}

TEST_F(CpuSegmentPoolTest, PooledSegmentsNeverTakeMoreThanAnEighthOfCapacity) {
  CpuSegmentPool pool(Options(4 << 20));  // pooled segments would be 1 MiB; capped at 512 KiB
  std::vector<std::string> removed;
  auto small = pool.Allocate(10, BlockKind::kImmutable, kAlice, &removed);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->segment_size, 512u << 10);
  auto mutable_block = pool.Allocate(10, BlockKind::kMutable, kAlice, &removed);
  auto large = pool.Allocate(2 << 20, BlockKind::kImmutable, kAlice, &removed);
  ASSERT_TRUE(mutable_block.ok() && large.ok()) << large.status();
  pool.Free(*small, &removed);
  pool.Free(*mutable_block, &removed);
  pool.Free(*large, &removed);
}

TEST_F(CpuSegmentPoolTest, CapacityIsEnforcedAndIdleSegmentsMakeRoom) {
  CpuSegmentPool pool(Options(2 << 20));
  std::vector<std::string> removed;
  auto small = pool.Allocate(10, BlockKind::kImmutable, kAlice, &removed);  // 256 KiB
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->segment_size, 256u << 10);
  auto too_big = pool.Allocate(1920 << 10, BlockKind::kImmutable, kAlice, &removed);
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(too_big.status().message().find("capacity"), std::string::npos);
  pool.Free(*small, &removed);  // idle now, kept...
  auto fits =
      pool.Allocate(1920 << 10, BlockKind::kImmutable, kAlice, &removed);  // ...until needed
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_EQ(removed.size(), 1u);
  pool.Free(*fits, &removed);
}

TEST_F(CpuSegmentPoolTest, MoreThanTheMachineHasIsResourceExhaustedAtOnce) {
  CpuSegmentPool pool(Options(uint64_t{1} << 50));
  std::vector<std::string> removed;
  auto huge = pool.Allocate(uint64_t{1} << 46, BlockKind::kImmutable, kAlice, &removed);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
  EXPECT_NE(huge.status().message().find("memory available"), std::string::npos) << huge.status();
}

// Adoption takes back only what MemfdSegment::Create made: a sealed, 0600 memfd of this user,
// a whole number of pages, read-write. Anything else handed over is refused, saying why.
TEST_F(CpuSegmentPoolTest, AdoptionRefusesWhatIsNotOneOfItsSegments) {
  CpuSegmentPool pool(Options(8 << 20));
  const long page = ::sysconf(_SC_PAGESIZE);
  // A segment as Create makes it, whose bytes were written by a previous instance.
  auto made = MemfdSegment::Create(prefix_ + "made", static_cast<uint64_t>(page));
  ASSERT_TRUE(made.ok()) << made.status();
  made->data()[300] = 42;
  UniqueFd good(::fcntl(made->read_write_fd(), F_DUPFD_CLOEXEC, 0));
  auto sealed = [&](mode_t mode, uid_t owner, off_t size) {
    UniqueFd fd(::memfd_create("other", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    EXPECT_EQ(::ftruncate(fd.get(), size), 0);
    EXPECT_EQ(::fchmod(fd.get(), mode), 0);
    EXPECT_EQ(::fchown(fd.get(), owner, static_cast<gid_t>(-1)), 0);
    EXPECT_EQ(::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 0);
    return fd;
  };
  auto refused = [&](UniqueFd fd, const std::string& why) {
    absl::Status status = pool.AdoptSegment(prefix_ + "bad", std::move(fd), 0);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << why;
    EXPECT_NE(status.message().find(why), std::string::npos) << status;
  };
  refused(sealed(0644, ::geteuid(), page), "not a mode-0600 file of this user");
  if (::geteuid() == 0) refused(sealed(0600, 65534, page), "not a mode-0600 file of this user");
  refused(sealed(0600, ::geteuid(), page + 1), "not a whole number of pages");
  UniqueFd unsealed(::memfd_create("other", MFD_CLOEXEC));
  ASSERT_EQ(::ftruncate(unsealed.get(), page), 0);
  ASSERT_EQ(::fchmod(unsealed.get(), 0600), 0);
  refused(std::move(unsealed), "its size is not sealed");
  refused(UniqueFd(::open(("/proc/self/fd/" + std::to_string(made->read_write_fd())).c_str(),
                          O_RDONLY | O_CLOEXEC)),
          "not a read-write descriptor");
  EXPECT_EQ(pool.Stats().segments, 0u);

  // The real one is taken back with its bytes; only a free, aligned range can be claimed.
  ASSERT_TRUE(pool.AdoptSegment(prefix_ + "made", std::move(good), 0).ok());
  auto block = pool.AdoptBlock(prefix_ + "made", 256, 256, BlockKind::kImmutable, kAlice);
  ASSERT_TRUE(block.ok()) << block.status();
  EXPECT_EQ(block->data[44], 42);
  EXPECT_EQ(
      pool.AdoptBlock(prefix_ + "made", 256, 256, BlockKind::kImmutable, kAlice).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      pool.AdoptBlock(prefix_ + "made", 512, 256, BlockKind::kImmutable, kBob).status().code(),
      absl::StatusCode::kInvalidArgument)
      << "another sharing key";
  std::vector<std::string> removed;
  pool.RemoveUnclaimed(&removed);
  EXPECT_TRUE(removed.empty()) << "a segment holding an adopted block stays";
  pool.Free(*block, &removed);
}

// Clients of the previous instance may still have an adopted segment's pages mapped until they
// reconnect: no new block goes into it during the grace period, and one that empties then is
// removed rather than kept for reuse. Afterwards it is an ordinary segment.
TEST_F(CpuSegmentPoolTest, AdoptedSegmentsTakeNoNewBlockUntilTheGraceEnds) {
  CpuSegmentPool pool(Options(64 << 20));
  const uint64_t pooled = 1 << 20;  // the options' pooled segment size
  auto made = MemfdSegment::Create(prefix_ + "old", pooled);
  ASSERT_TRUE(made.ok()) << made.status();
  ASSERT_TRUE(pool.AdoptSegment(prefix_ + "old",
                                UniqueFd(::fcntl(made->read_write_fd(), F_DUPFD_CLOEXEC, 0)), 0)
                  .ok());
  auto kept = pool.AdoptBlock(prefix_ + "old", 0, 1024, BlockKind::kImmutable, kAlice);
  ASSERT_TRUE(kept.ok()) << kept.status();
  std::vector<std::string> removed;
  pool.RemoveUnclaimed(&removed);
  auto during = pool.Allocate(1024, BlockKind::kImmutable, kAlice, &removed);
  ASSERT_TRUE(during.ok()) << during.status();
  EXPECT_NE(during->segment, prefix_ + "old") << "a new segment, not the adopted one";
  EXPECT_EQ(pool.Stats().segments, 2u);

  // After it, the adopted segment is like any other: emptied, it is the one kept for reuse
  // (the other idle one of the same owner goes).
  pool.EndAdoptionGrace();
  pool.Free(*during, &removed);
  EXPECT_TRUE(removed.empty());
  pool.Free(*kept, &removed);
  EXPECT_EQ(removed, std::vector<std::string>{during->segment});
  EXPECT_EQ(pool.Stats().segments, 1u);

  // Emptied during the grace period: removed, not kept idle.
  auto again = MemfdSegment::Create(prefix_ + "old2", pooled);
  ASSERT_TRUE(again.ok()) << again.status();
  CpuSegmentPool fresh(Options(64 << 20));
  ASSERT_TRUE(fresh
                  .AdoptSegment(prefix_ + "old2",
                                UniqueFd(::fcntl(again->read_write_fd(), F_DUPFD_CLOEXEC, 0)), 0)
                  .ok());
  auto only = fresh.AdoptBlock(prefix_ + "old2", 0, 1024, BlockKind::kImmutable, kAlice);
  ASSERT_TRUE(only.ok()) << only.status();
  removed.clear();
  fresh.Free(*only, &removed);
  EXPECT_EQ(removed, std::vector<std::string>{prefix_ + "old2"});
  EXPECT_EQ(fresh.Stats().segments, 0u);
}

}  // namespace
}  // namespace tensorbroker::daemon
