// Zero-copy sharing across real processes: a consumer peer's data pointer maps the same
// memfd segment (same inode) at the same offset as the producer's (read-only for sealed tensors, a
// write faults), pointers are 256-byte aligned, small tensors share pooled segments, and a mutable
// tensor's writes are seen both ways between two processes.
#include <signal.h>
#include <sys/wait.h>

#include <cstdint>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/integration/test_util.h"

namespace tensorbroker::testing {
namespace {

using SharingTest = BrokerTest;

// Creates float32 `name` of `n` elements filled with `fill`, seals it; returns the producer's
// Create tensor (its lease still held).
DLManagedTensorVersioned* CreateFilled(Client& client, const std::string& name, int64_t n,
                                       float fill) {
  auto t = client.Create(name, {n}, dtypes::kFloat32);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return nullptr;
  float* p = reinterpret_cast<float*>(MutableDataOf((*t)->dl_tensor));
  for (int64_t i = 0; i < n; ++i) p[i] = fill;
  auto info = client.Seal(name);
  EXPECT_TRUE(info.ok()) << info.status();
  return *t;
}

void ExpectConsumerSharesPages(Client& client, const std::string& socket, const std::string& name,
                               int64_t n, float fill) {
  DLManagedTensorVersioned* produced = CreateFilled(client, name, n, fill);
  ASSERT_NE(produced, nullptr);
  TensorPtr producer_lease(produced);
  const DLTensor& d = produced->dl_tensor;
  const uintptr_t producer_ptr = reinterpret_cast<uintptr_t>(DataOf(d));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(d.data) % 256, 0u) << "producer pointer not 256-aligned";
  ASSERT_OK_AND_ASSIGN(Mapping mine, FindMapping(producer_ptr));
  EXPECT_TRUE(absl::StartsWith(mine.path, std::string(kMemfdPathPrefix) + kSegmentPrefix))
      << mine.path;
  EXPECT_EQ(mine.perms.back(), 's') << "producer mapping is not MAP_SHARED: " << mine.perms;
  const uint64_t my_offset = FileOffsetOf(mine, producer_ptr);
  EXPECT_EQ(my_offset % 256, 0u);

  // The consumer process: exact bytes first.
  ASSERT_OK_AND_ASSIGN(PeerResult got,
                       RunPeer(socket, {"get", name, "--expect-fill", absl::StrCat(fill)}));
  ASSERT_TRUE(WIFEXITED(got.status) && WEXITSTATUS(got.status) == 0)
      << DescribeWaitStatus(got.status) << "\n"
      << got.out;
  const auto fields = ParseFields(got.out.substr(0, got.out.find('\n')));
  EXPECT_EQ(fields.at(""), "got");
  EXPECT_EQ(fields.at("shape"), absl::StrCat(n));
  EXPECT_EQ(fields.at("strides"), "1");
  EXPECT_EQ(fields.at("nbytes"), absl::StrCat(n * 4));
  EXPECT_EQ(fields.at("hash"), HashBytes(DataOf(d), static_cast<size_t>(n) * 4));
  EXPECT_EQ(fields.at("readonly"), "1")
      << "a sealed tensor must carry DLPACK_FLAG_BITMASK_READ_ONLY";
  EXPECT_EQ(fields.at("aligned"), "1");

  // Then where its pointer lives: the same file, the same offset, read-only and shared.
  ASSERT_OK_AND_ASSIGN(PeerResult maps, RunPeer(socket, {"maps", name}));
  ASSERT_TRUE(WIFEXITED(maps.status) && WEXITSTATUS(maps.status) == 0)
      << DescribeWaitStatus(maps.status) << "\n"
      << maps.out;
  const auto m = ParseFields(maps.out.substr(0, maps.out.find('\n')));
  ASSERT_EQ(m.at(""), "map") << maps.out;
  EXPECT_EQ(m.at("path"), mine.path);
  EXPECT_EQ(m.at("inode"), absl::StrCat(mine.inode)) << "not the very same file";
  EXPECT_EQ(m.at("offset"), absl::StrCat(my_offset));
  EXPECT_EQ(m.at("perms"), "r--s") << "a sealed tensor must be mapped read-only, MAP_SHARED";
  EXPECT_EQ(m.at("deleted"), "1") << "a memfd has no name in any directory";
  EXPECT_EQ(m.at("aligned"), "1");
  EXPECT_EQ(m.at("hash"), HashBytes(DataOf(d), static_cast<size_t>(n) * 4));
}

TEST_F(SharingTest, ConsumerProcessMapsTheSameShmPagesReadOnlySmallTensor) {
  ExpectConsumerSharesPages(client(), socket(), "share/small", 1000, 1.5f);
}

TEST_F(SharingTest, ConsumerProcessMapsTheSameShmPagesReadOnlyLargeTensor) {
  // 32 MiB: above the pooled-segment threshold, so it gets a segment of its own.
  ExpectConsumerSharesPages(client(), socket(), "share/large", 8 << 20, -2.25f);
}

TEST_F(SharingTest, GetInTheProducerProcessReturnsTheSameBytesAtThe256AlignedOffset) {
  TensorPtr produced(CreateFilled(client(), "share/self", 77, 3.0f));
  ASSERT_NE(produced, nullptr);
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw, client().Get("share/self"));
  TensorPtr got(raw);
  EXPECT_EQ(got->version.major, static_cast<uint32_t>(DLPACK_MAJOR_VERSION));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(got->dl_tensor.data) % 256, 0u);
  EXPECT_NE(got->flags & DLPACK_FLAG_BITMASK_READ_ONLY, 0u);
  EXPECT_EQ(got->dl_tensor.device.device_type, kDLCPU);
  ASSERT_OK_AND_ASSIGN(Mapping a, FindMapping(DataOf(produced->dl_tensor)));
  ASSERT_OK_AND_ASSIGN(Mapping b, FindMapping(DataOf(got->dl_tensor)));
  EXPECT_EQ(a.path, b.path);
  EXPECT_EQ(FileOffsetOf(a, reinterpret_cast<uintptr_t>(DataOf(produced->dl_tensor))),
            FileOffsetOf(b, reinterpret_cast<uintptr_t>(DataOf(got->dl_tensor))));
  EXPECT_EQ(FloatsOf(got->dl_tensor), std::vector<float>(77, 3.0f));
}

TEST_F(SharingTest, WritingASealedTensorFaultsInTheConsumer) {
  ASSERT_OK(PutFloats(client(), "share/sealed", std::vector<float>(64, 1.0f)));
  ASSERT_OK_AND_ASSIGN(auto peer, PeerProcess::Start(socket(), {"write-sealed", "share/sealed"}));
  ASSERT_OK_AND_ASSIGN(std::string line, peer.ReadLine());
  EXPECT_EQ(line, "writing");
  ASSERT_OK_AND_ASSIGN(int status, peer.Wait());
  EXPECT_TRUE(WIFSIGNALED(status) && (WTERMSIG(status) == SIGSEGV || WTERMSIG(status) == SIGBUS))
      << "a write to a sealed tensor must fault; the peer " << DescribeWaitStatus(status);
  // The data is untouched and the daemon still serves.
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw, client().Get("share/sealed"));
  TensorPtr t(raw);
  EXPECT_EQ(FloatsOf(t->dl_tensor), std::vector<float>(64, 1.0f));
}

TEST_F(SharingTest, SmallTensorsSharePooledSegmentsEachMappedOnce) {
  std::vector<TensorPtr> held;
  std::set<std::string> files;
  for (int i = 0; i < 4; ++i) {
    const std::string name = absl::StrCat("pool/", i);
    ASSERT_OK(PutFloats(client(), name, std::vector<float>(100, static_cast<float>(i))));
    ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw, client().Get(name));
    held.emplace_back(raw);
    ASSERT_OK_AND_ASSIGN(Mapping m, FindMapping(DataOf(raw->dl_tensor)));
    files.insert(m.path);
    EXPECT_EQ(FloatsOf(raw->dl_tensor), std::vector<float>(100, static_cast<float>(i)));
  }
  EXPECT_EQ(files.size(), 1u) << "four 400-byte tensors should share one pooled segment";
  // The client maps a segment once per process and reuses the mapping.
  ASSERT_OK_AND_ASSIGN(Mapping m0, FindMapping(DataOf(held[0]->dl_tensor)));
  for (const TensorPtr& t : held) {
    ASSERT_OK_AND_ASSIGN(Mapping m, FindMapping(DataOf(t->dl_tensor)));
    EXPECT_EQ(m.start, m0.start) << "segment mapped more than once";
  }
  // Distinct, non-overlapping, aligned blocks.
  std::set<uintptr_t> starts;
  for (const TensorPtr& t : held) starts.insert(reinterpret_cast<uintptr_t>(t->dl_tensor.data));
  EXPECT_EQ(starts.size(), 4u);
  uintptr_t prev = 0;
  for (uintptr_t s : starts) {
    EXPECT_EQ(s % 256, 0u);
    if (prev != 0) {
      EXPECT_GE(s - prev, 400u);
    }
    prev = s;
  }
}

TEST_F(SharingTest, MutableTensorWritesAreSeenAcrossProcessesBothWays) {
  CreateOptions options;
  options.is_mutable = true;
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw,
                       client().Create("mut/x", {16}, dtypes::kFloat32, options));
  TensorPtr mine(raw);
  float* p = reinterpret_cast<float*>(MutableDataOf(mine->dl_tensor));
  for (int i = 0; i < 16; ++i) p[i] = static_cast<float>(i);
  ASSERT_OK_AND_ASSIGN(TensorInfo info, client().Seal("mut/x"));
  EXPECT_TRUE(info.is_mutable);

  // A short-lived writer process.
  ASSERT_OK_AND_ASSIGN(PeerResult w, RunPeer(socket(), {"write-mutable", "mut/x", "3", "42.5"}));
  ASSERT_TRUE(WIFEXITED(w.status) && WEXITSTATUS(w.status) == 0)
      << DescribeWaitStatus(w.status) << "\n"
      << w.out;
  EXPECT_EQ(w.out, "written\n");
  EXPECT_EQ(p[3], 42.5f);

  // A long-lived peer holding the same tensor: both directions, repeatedly.
  ASSERT_OK_AND_ASSIGN(auto peer, PeerProcess::Start(socket(), {"serve", "mut/x"}));
  ASSERT_OK_AND_ASSIGN(std::string ready, peer.ReadLine());
  EXPECT_EQ(ready, "ready readonly=0") << "a mutable tensor must not be flagged read-only";
  ASSERT_OK(peer.WriteLine("r 3"));
  ASSERT_OK_AND_ASSIGN(std::string v3, peer.ReadLine());
  EXPECT_EQ(v3, "value 42.5");
  p[5] = -7.25f;  // this process writes, the peer reads
  ASSERT_OK(peer.WriteLine("r 5"));
  ASSERT_OK_AND_ASSIGN(std::string v5, peer.ReadLine());
  EXPECT_EQ(v5, "value -7.25");
  ASSERT_OK(peer.WriteLine("w 7 1e+30"));  // the peer writes, this process reads
  ASSERT_OK_AND_ASSIGN(std::string ok, peer.ReadLine());
  EXPECT_EQ(ok, "ok");
  EXPECT_EQ(p[7], 1e30f);
  // A fresh Get in this process sees it too, through a writable mapping.
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * again_raw, client().Get("mut/x"));
  TensorPtr again(again_raw);
  EXPECT_EQ(again->flags & DLPACK_FLAG_BITMASK_READ_ONLY, 0u);
  const float* q = reinterpret_cast<const float*>(DataOf(again->dl_tensor));
  EXPECT_EQ(q[3], 42.5f);
  EXPECT_EQ(q[5], -7.25f);
  EXPECT_EQ(q[7], 1e30f);
  ASSERT_OK_AND_ASSIGN(Mapping m, FindMapping(q));
  EXPECT_EQ(m.perms.substr(0, 2), "rw") << m.perms;
  EXPECT_EQ(m.perms.back(), 's') << m.perms;
  peer.CloseStdin();
  ASSERT_OK_AND_ASSIGN(int status, peer.Wait());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << DescribeWaitStatus(status);
}

}  // namespace
}  // namespace tensorbroker::testing
