// Reads without a round trip (issue 34; docs/architecture.md, "Reads without a round trip"): a
// process's uid directory answers LatestVersion with no call, a Get of the current version in a
// segment the process maps asks nothing of the daemon (the daemon's own Get count says so), a
// follower of a name replaced 10,000 times never reads a torn or freed tensor, a process killed
// while its lease table holds a version has it freed within the second, and 100,000 such Gets
// leave descriptors and mappings as they were. The tests of other uids (a non-reader's
// directory, a hostile lease table) are in tenancy_test.cc.
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/integration/stamped_tensor.h"
#include "tests/integration/test_util.h"

namespace tensorbroker::testing {
namespace {

using FastReadTest = BrokerTest;

constexpr uint64_t kElements = 1024;  // 8 KiB per version

// Publishes (replacing) uint64[kElements] stamped with `stamp` under `name`.
absl::StatusOr<TensorInfo> PutStamped(Client& client, const std::string& name, uint64_t stamp) {
  std::vector<uint64_t> values(kElements);
  FillStamped(name, stamp, values.data(), kElements);
  std::vector<int64_t> shape = {static_cast<int64_t>(kElements)};
  PutOptions options;
  options.replace = true;
  return client.Put(name, HostTensor(values.data(), shape, dtypes::kUInt64), options);
}

// Calls of `method` the daemon has answered (any code).
uint64_t CallsOf(Client& client, const std::string& method) {
  auto stats = client.Stats();
  EXPECT_TRUE(stats.ok()) << stats.status();
  if (!stats.ok()) return 0;
  for (const MethodStats& m : stats->methods) {
    if (m.method == method) return m.latency_count;
  }
  return 0;
}

uint64_t UsedBytes(Client& client) {
  auto stats = client.Stats();
  EXPECT_TRUE(stats.ok()) << stats.status();
  return stats.ok() ? stats->used_bytes : 0;
}

// This process's descriptors and mappings of memfds (the daemon's segments and fast-read files).
int MemfdDescriptors() {
  int count = 0;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  while (const dirent* entry = ::readdir(dir)) {
    char target[256] = {};
    const std::string path = absl::StrCat("/proc/self/fd/", entry->d_name);
    if (::readlink(path.c_str(), target, sizeof(target) - 1) > 0 &&
        absl::StartsWith(target, "/memfd:")) {
      ++count;
    }
  }
  ::closedir(dir);
  return count;
}
int MemfdMappings() {
  std::ifstream maps("/proc/self/maps");
  int count = 0;
  for (std::string line; std::getline(maps, line);) count += line.find("/memfd:") != line.npos;
  return count;
}

TEST_F(FastReadTest, LatestVersionAndChangedSinceFollowTheNameWithoutACall) {
  ASSERT_OK_AND_ASSIGN(TensorInfo first, PutStamped(client(), "latest/a", 1));
  const uint64_t stats_before = CallsOf(client(), "Stat");
  ASSERT_OK_AND_ASSIGN(uint64_t latest, client().LatestVersion("latest/a"));
  EXPECT_EQ(latest, first.version);
  ASSERT_OK_AND_ASSIGN(bool changed, client().ChangedSince("latest/a", first.version));
  EXPECT_FALSE(changed);

  ASSERT_OK_AND_ASSIGN(TensorInfo second, PutStamped(client(), "latest/a", 2));
  ASSERT_OK_AND_ASSIGN(latest, client().LatestVersion("latest/a"));
  EXPECT_EQ(latest, second.version);
  ASSERT_OK_AND_ASSIGN(changed, client().ChangedSince("latest/a", first.version));
  EXPECT_TRUE(changed);

  // Another client of the same uid sees the same directory.
  std::unique_ptr<Client> other = NewClient();
  ASSERT_NE(other, nullptr);
  ASSERT_OK_AND_ASSIGN(latest, other->LatestVersion("latest/a"));
  EXPECT_EQ(latest, second.version);

  ASSERT_OK(client().Delete("latest/a"));
  EXPECT_STATUS(client().LatestVersion("latest/a"), absl::StatusCode::kNotFound,
                "name 'latest/a' is not published");
  EXPECT_STATUS(client().ChangedSince("latest/a", second.version), absl::StatusCode::kNotFound,
                "name 'latest/a' is not published");
  EXPECT_STATUS(client().LatestVersion("latest/never"), absl::StatusCode::kNotFound,
                "name 'latest/never' is not published");
  EXPECT_EQ(CallsOf(client(), "Stat"), stats_before) << "every answer came from the directory";

  // Without fast reads the same answers come from Stat calls.
  ConnectOptions plain;
  plain.socket_path = socket();
  plain.fast_reads = false;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> asking, Client::Connect(plain));
  ASSERT_OK_AND_ASSIGN(TensorInfo third, PutStamped(client(), "latest/a", 3));
  ASSERT_OK_AND_ASSIGN(latest, asking->LatestVersion("latest/a"));
  EXPECT_EQ(latest, third.version);
  EXPECT_STATUS(asking->LatestVersion("latest/never"), absl::StatusCode::kNotFound,
                "name 'latest/never' is not published");
  EXPECT_EQ(CallsOf(client(), "Stat"), stats_before + 2);
}

TEST_F(FastReadTest, AGetOfTheCurrentVersionInAMappedSegmentAsksNothingOfTheDaemon) {
  ASSERT_OK(PutStamped(client(), "direct/a", 7));
  GetOptions local;
  local.no_round_trip = true;
  const std::string unmapped =
      "no_round_trip: name 'direct/a' cannot be answered from this process's directory and "
      "mappings (not published, not readable, in a segment not mapped here yet, or no fast "
      "reads); a Get without no_round_trip asks the daemon";
  EXPECT_STATUS(client().Get("direct/a", local), absl::StatusCode::kFailedPrecondition, unmapped);
  {
    ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * a, client().Get("direct/a"));
    TensorPtr release(a);  // this Get maps the segment (a call)
  }
  ASSERT_OK_AND_ASSIGN(TensorInfo b_info, PutStamped(client(), "direct/b", 8));  // same segment
  const uint64_t gets_before = CallsOf(client(), "Get");
  for (int i = 0; i < 100; ++i) {
    ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * b, client().Get("direct/b"));
    TensorPtr tensor(b);
    const auto* values = static_cast<const uint64_t*>(b->dl_tensor.data);
    ASSERT_EQ(FirstUnstampedElement("direct/b", values, kElements), std::nullopt);
    EXPECT_EQ(values[1], 8u);
    EXPECT_EQ(b->flags & DLPACK_FLAG_BITMASK_READ_ONLY, DLPACK_FLAG_BITMASK_READ_ONLY);
    ASSERT_OK_AND_ASSIGN(TensorInfo described, client().Describe(*b));
    EXPECT_EQ(described.version, b_info.version);
    EXPECT_EQ(described.name, "direct/b");
    EXPECT_EQ(described.shape, std::vector<int64_t>{static_cast<int64_t>(kElements)});
    if (i == 0) {
      // The lease is a slot of this process's table, and the daemon counts it.
      EXPECT_EQ(LeasesOf(client(), "direct/b"), 1);
      ASSERT_OK_AND_ASSIGN(BrokerStats stats, client().Stats());
      EXPECT_EQ(stats.leases, 1u);
    }
  }
  EXPECT_EQ(CallsOf(client(), "Get"), gets_before) << "no Get reached the daemon";
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * local_b, client().Get("direct/b", local));
  TensorPtr local_ptr(local_b);
  EXPECT_EQ(static_cast<const uint64_t*>(local_b->dl_tensor.data)[1], 8u);
  EXPECT_CODE(client().Get("direct/none", local), absl::StatusCode::kFailedPrecondition);
  local_ptr.reset();
  EXPECT_EQ(LeasesOf(client(), "direct/b"), 0) << "the slot went back with the last tensor";

  // A version this process holds is shared, as with a granted lease; a newer one is found too.
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * held, client().Get("direct/b"));
  TensorPtr held_ptr(held);
  ASSERT_OK_AND_ASSIGN(TensorInfo newer, PutStamped(client(), "direct/b", 9));
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * next, client().Get("direct/b"));
  TensorPtr next_ptr(next);
  EXPECT_EQ(static_cast<const uint64_t*>(next->dl_tensor.data)[1], 9u);
  EXPECT_EQ(static_cast<const uint64_t*>(held->dl_tensor.data)[1], 8u) << "the old one intact";
  ASSERT_OK_AND_ASSIGN(TensorInfo described, client().Describe(*next));
  EXPECT_EQ(described.version, newer.version);
  EXPECT_EQ(CallsOf(client(), "Get"), gets_before);
}

TEST_F(FastReadTest, AFollowerOfANameReplaced10000TimesNeverSeesATornOrFreedTensor) {
  constexpr int kReplaces = 10000;
  ASSERT_OK(PutStamped(client(), "follow/x", 0));
  ASSERT_OK_AND_ASSIGN(auto follower, PeerProcess::Start(socket(), {"follow", "follow/x", "--count",
                                                                    std::to_string(kReplaces)}));
  const uint64_t gets_before = CallsOf(client(), "Get");
  for (int stamp = 1; stamp <= kReplaces; ++stamp) {
    ASSERT_OK(PutStamped(client(), "follow/x", stamp));
  }
  ASSERT_OK_AND_ASSIGN(std::string followed, follower.ReadLine(std::chrono::seconds(300)));
  std::vector<std::string> words = absl::StrSplit(followed, ' ');
  ASSERT_EQ(words.size(), 7u) << followed;
  EXPECT_EQ(words[0], "followed");
  EXPECT_EQ(words[4], "0") << "torn or freed tensors read: " << followed;
  EXPECT_EQ(words[6], "0") << "versions that went backwards: " << followed;
  ASSERT_OK_AND_ASSIGN(std::string idle, follower.ReadLine());
  ASSERT_EQ(idle, "idle");
  const uint64_t daemon_gets = CallsOf(client(), "Get") - gets_before;
  std::printf("follower: %s gets, %s versions; %llu of its gets reached the daemon\n",
              words[1].c_str(), words[2].c_str(), static_cast<unsigned long long>(daemon_gets));

  // Holding nothing, its table is empty: no lease, and only the current version in memory once
  // the daemon looked again (its tick, at most a second).
  EXPECT_EQ(LeasesOf(client(), "follow/x"), 0);
  ASSERT_OK_AND_ASSIGN(BrokerStats stats, client().Stats());
  EXPECT_EQ(stats.leases, 0u);
  EXPECT_TRUE(PollUntil([&] { return UsedBytes(client()) == kElements * 8; }))
      << UsedBytes(client()) << " bytes used";
  follower.CloseStdin();
  ASSERT_OK_AND_ASSIGN(int status, follower.Wait());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << DescribeWaitStatus(status);
}

TEST_F(FastReadTest, AKilledProcesssTableLeasesAreReclaimedWithinASecond) {
  ASSERT_OK(PutStamped(client(), "killed/a", 1));
  ASSERT_OK(PutStamped(client(), "killed/b", 2));  // the same segment
  const uint64_t gets_before = CallsOf(client(), "Get");
  ASSERT_OK_AND_ASSIGN(auto holder, PeerProcess::Start(socket(), {"hold", "killed/a", "killed/b"}));
  ASSERT_OK_AND_ASSIGN(std::string held, holder.ReadLine());
  ASSERT_EQ(held, "held");
  EXPECT_EQ(CallsOf(client(), "Get") - gets_before, 1u) << "killed/b came from the directory";
  EXPECT_EQ(LeasesOf(client(), "killed/b"), 1);

  // Unpublished, both stay in memory: one for its granted lease, one for the table's slot.
  ASSERT_OK(client().Delete("killed/a"));
  ASSERT_OK(client().Delete("killed/b"));
  EXPECT_EQ(UsedBytes(client()), 2 * kElements * 8);
  holder.Signal(SIGKILL);
  ASSERT_OK_AND_ASSIGN(int status, holder.Wait());
  EXPECT_TRUE(WIFSIGNALED(status)) << DescribeWaitStatus(status);
  EXPECT_TRUE(PollUntil([&] { return UsedBytes(client()) == 0; }, std::chrono::seconds(1)))
      << UsedBytes(client()) << " bytes still used a second after the kill";
}

TEST_F(FastReadTest, DescriptorsAndMappingsStayFlatOver100000Gets) {
  ASSERT_OK(PutStamped(client(), "flat/x", 0));
  {
    ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * t, client().Get("flat/x"));
    TensorPtr release(t);
  }
  const int descriptors = MemfdDescriptors();
  const int mappings = MemfdMappings();
  const uint64_t gets_before = CallsOf(client(), "Get");
  uint64_t stamp = 0;
  for (int i = 1; i <= 100000; ++i) {
    ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * t, client().Get("flat/x"));
    const uint64_t read = static_cast<const uint64_t*>(t->dl_tensor.data)[1];
    t->deleter(t);
    ASSERT_EQ(read, stamp) << "get " << i;
    if (i % 10000 == 0) ASSERT_OK(PutStamped(client(), "flat/x", ++stamp));
  }
  EXPECT_EQ(MemfdDescriptors(), descriptors);
  EXPECT_EQ(MemfdMappings(), mappings);
  EXPECT_EQ(CallsOf(client(), "Get"), gets_before) << "every version lay in the mapped segment";
  ASSERT_OK_AND_ASSIGN(BrokerStats stats, client().Stats());
  EXPECT_EQ(stats.leases, 0u);
}

}  // namespace
}  // namespace tensorbroker::testing
