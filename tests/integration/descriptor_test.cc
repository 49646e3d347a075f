// Descriptors over the local channel: a segment's descriptor reaches a process once, however
// many tensors it maps from it, and descriptor counts stay flat over 10,000 get/release cycles,
// in the client and in the daemon.
#include <dirent.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/integration/test_util.h"

namespace tensorbroker::testing {
namespace {

// Open descriptors of `pid` (0: this process), and how many of them are segments (memfds).
struct Descriptors {
  int total = 0;
  int segments = 0;
};
Descriptors DescriptorsOf(pid_t pid) {
  const std::string dir = pid == 0 ? "/proc/self/fd" : absl::StrCat("/proc/", pid, "/fd");
  Descriptors d;
  DIR* listing = ::opendir(dir.c_str());
  if (listing == nullptr) return d;
  while (dirent* entry = ::readdir(listing)) {
    if (entry->d_name[0] == '.') continue;
    ++d.total;
    char target[512];
    const ssize_t n = ::readlink((dir + "/" + entry->d_name).c_str(), target, sizeof(target) - 1);
    if (n > 0 && absl::StartsWith(absl::string_view(target, static_cast<size_t>(n)),
                                  std::string(kMemfdPathPrefix) + kSegmentPrefix)) {
      ++d.segments;
    }
  }
  ::closedir(listing);
  return d;
}

using DescriptorTest = BrokerTest;

TEST_F(DescriptorTest, CountsStayFlatOverTenThousandGetReleaseCycles) {
  // Several tensors in one pooled segment, and one in a dedicated segment.
  for (int i = 0; i < 4; ++i) ASSERT_OK(PutFloats(client(), absl::StrCat("fd/small", i), {1, 2}));
  ASSERT_OK(PutFloats(client(), "fd/large", std::vector<float>(5 << 20, 3.0f)));  // 20 MiB
  auto cycle = [&](const std::string& name) {
    auto t = client().Get(name);
    ASSERT_TRUE(t.ok()) << t.status();
    (*t)->deleter(*t);
  };
  for (int i = 0; i < 4; ++i) cycle(absl::StrCat("fd/small", i));
  cycle("fd/large");
  ASSERT_OK(client().Ping());  // the releases have arrived
  const Descriptors client_before = DescriptorsOf(0);
  const Descriptors daemon_before = DescriptorsOf(daemon_->pid());
  // Per segment and access mode, however many tensors: the producer's read-write descriptors
  // (Put is Create + fill + Seal) and the consumer's read-only ones, of two segments.
  EXPECT_EQ(client_before.segments, 4);

  for (int i = 0; i < 10000; ++i) {
    cycle(i % 5 == 4 ? "fd/large" : absl::StrCat("fd/small", i % 5));
    if (HasFatalFailure()) return;
  }
  ASSERT_OK(client().Ping());
  const Descriptors client_after = DescriptorsOf(0);
  const Descriptors daemon_after = DescriptorsOf(daemon_->pid());
  EXPECT_EQ(client_after.total, client_before.total) << "the client leaks descriptors";
  EXPECT_EQ(client_after.segments, client_before.segments);
  EXPECT_EQ(daemon_after.total, daemon_before.total) << "the daemon leaks descriptors";
  EXPECT_EQ(daemon_after.segments, daemon_before.segments);
  ASSERT_OK_AND_ASSIGN(BrokerStats stats, client().Stats());
  EXPECT_EQ(stats.leases, 0u);
}

}  // namespace
}  // namespace tensorbroker::testing
