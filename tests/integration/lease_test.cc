// Leases and object lifetime: a client holds one broker lease per tensor version however many
// local references it has (Get, GetLegacy, Retain), so Stat(name).leases counts the processes
// holding the current version, and falls when a process's last deleter runs; Delete and
// replace only unpublish, so holders keep reading their bytes, and memory (Stats.used_bytes)
// is freed only after the last deleter.
#include <sys/wait.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/integration/test_util.h"

namespace tensorbroker::testing {
namespace {

using LeaseTest = BrokerTest;

TEST_F(LeaseTest, OneLeasePerProcessAndVersionFallingWhenTheProcesssLastDeleterRuns) {
  const std::vector<float> values = {1, 2, 3, 4, 5};
  ASSERT_OK(PutFloats(client(), "lease/a", values));
  EXPECT_EQ(LeasesOf(client(), "lease/a"), 0) << "Put keeps no lease";

  std::vector<DLManagedTensorVersioned*> mine;
  for (int i = 1; i <= 3; ++i) {
    ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * t, client().Get("lease/a"));
    mine.push_back(t);
    EXPECT_EQ(LeasesOf(client(), "lease/a"), 1) << "Get " << i << " shares the lease";
    EXPECT_EQ(t->dl_tensor.data, mine.front()->dl_tensor.data) << "and the mapping";
  }
  ASSERT_OK_AND_ASSIGN(DLManagedTensor * legacy, client().GetLegacy("lease/a"));
  EXPECT_EQ(LeasesOf(client(), "lease/a"), 1);
  EXPECT_EQ(FloatsOf(legacy->dl_tensor), values);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(legacy->dl_tensor.data) % 256, 0u);
  ASSERT_NE(legacy->dl_tensor.strides, nullptr);
  EXPECT_EQ(StridesOf(legacy->dl_tensor), std::vector<int64_t>{1});

  // Another process takes two plain leases and two legacy ones.
  ASSERT_OK_AND_ASSIGN(auto peer,
                       PeerProcess::Start(socket(), {"hold", "lease/a", "--count", "2"}));
  ASSERT_OK_AND_ASSIGN(std::string held, peer.ReadLine());
  ASSERT_EQ(held, "held");
  EXPECT_EQ(LeasesOf(client(), "lease/a"), 2);
  ASSERT_OK_AND_ASSIGN(auto legacy_peer, PeerProcess::Start(socket(), {"hold", "lease/a", "--count",
                                                                       "2", "--legacy"}));
  ASSERT_OK_AND_ASSIGN(std::string held2, legacy_peer.ReadLine());
  ASSERT_EQ(held2, "held");
  EXPECT_EQ(LeasesOf(client(), "lease/a"), 3);
  ASSERT_OK_AND_ASSIGN(BrokerStats stats, client().Stats());
  EXPECT_EQ(stats.leases, 3u);

  // A process's lease ends with its last local reference.
  mine.back()->deleter(mine.back());
  mine.pop_back();
  EXPECT_EQ(LeasesOf(client(), "lease/a"), 3);
  legacy->deleter(legacy);
  EXPECT_EQ(LeasesOf(client(), "lease/a"), 3);
  ASSERT_OK(peer.WriteLine("release"));
  ASSERT_OK_AND_ASSIGN(std::string released, peer.ReadLine());
  ASSERT_EQ(released, "released");
  EXPECT_EQ(LeasesOf(client(), "lease/a"), 2);
  ASSERT_OK(legacy_peer.WriteLine("release"));
  ASSERT_OK_AND_ASSIGN(std::string released2, legacy_peer.ReadLine());
  ASSERT_EQ(released2, "released");
  EXPECT_EQ(LeasesOf(client(), "lease/a"), 1);
  for (DLManagedTensorVersioned* t : mine) {
    EXPECT_EQ(FloatsOf(t->dl_tensor), values);
    t->deleter(t);
  }
  EXPECT_EQ(LeasesOf(client(), "lease/a"), 0);
  ASSERT_OK_AND_ASSIGN(BrokerStats after, client().Stats());
  EXPECT_EQ(after.leases, 0u);

  peer.CloseStdin();
  legacy_peer.CloseStdin();
  ASSERT_OK_AND_ASSIGN(int s1, peer.Wait());
  ASSERT_OK_AND_ASSIGN(int s2, legacy_peer.Wait());
  EXPECT_TRUE(WIFEXITED(s1) && WEXITSTATUS(s1) == 0) << DescribeWaitStatus(s1);
  EXPECT_TRUE(WIFEXITED(s2) && WEXITSTATUS(s2) == 0) << DescribeWaitStatus(s2);
}

TEST_F(LeaseTest, TwoClientsOfOneProcessShareOneLeasePerVersion) {
  ASSERT_OK(PutFloats(client(), "lease/two", {1, 2, 3}));
  std::unique_ptr<Client> other = NewClient();
  ASSERT_NE(other, nullptr);
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * a, client().Get("lease/two"));
  TensorPtr first(a);
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * b, other->Get("lease/two"));
  TensorPtr second(b);
  ASSERT_OK(other->Ping());  // its Get's own lease went back: the process holds one
  EXPECT_EQ(LeasesOf(client(), "lease/two"), 1);
  EXPECT_EQ(first->dl_tensor.data, second->dl_tensor.data);
  // Each Client still knows its own tensors: Retain through the other one is refused.
  EXPECT_CODE(client().Retain(*second), absl::StatusCode::kInvalidArgument);
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * c, other->Retain(*second));
  TensorPtr third(c);
  first.reset();  // the lease was the first Client's: it lives on for the other's tensors
  other.reset();
  EXPECT_EQ(LeasesOf(client(), "lease/two"), 1);
  EXPECT_EQ(FloatsOf(third->dl_tensor), (std::vector<float>{1, 2, 3}));
  second.reset();
  third.reset();
  EXPECT_EQ(LeasesOf(client(), "lease/two"), 0);
}

// Put keeps no lease, so the TensorInfo it returns (like Stat's right after) says 0 leases, as
// the raw gRPC Put does.
TEST_F(LeaseTest, PutReturnsInfoWithZeroLeases) {
  ASSERT_OK_AND_ASSIGN(TensorInfo put, PutFloats(client(), "lease/p", {1, 2}));
  ASSERT_OK_AND_ASSIGN(TensorInfo stat, client().Stat("lease/p"));
  EXPECT_EQ(stat.leases, 0u);
  EXPECT_EQ(put.leases, stat.leases) << "Put's TensorInfo counts a lease that no longer exists";
  EXPECT_TRUE(put.sealed);
  EXPECT_EQ(put.version, stat.version);
}

TEST_F(LeaseTest, CreateLeaseCountsOnTheSealedVersion) {
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw,
                       client().Create("lease/c", {4}, dtypes::kInt32));
  TensorPtr created(raw);
  ASSERT_OK_AND_ASSIGN(BrokerStats pending, client().Stats());
  EXPECT_EQ(pending.pending, 1u);
  EXPECT_EQ(pending.tensors, 0u);
  // Stat reports a pending tensor (proto: "published (or pending)"); Get does not see it.
  ASSERT_OK_AND_ASSIGN(TensorInfo unsealed, client().Stat("lease/c"));
  EXPECT_FALSE(unsealed.sealed);
  EXPECT_CODE(client().Get("lease/c"), absl::StatusCode::kNotFound);
  ASSERT_OK_AND_ASSIGN(std::vector<TensorInfo> listed, client().List("lease/"));
  for (const TensorInfo& info : listed) EXPECT_TRUE(info.sealed) << info.name;
  ASSERT_OK_AND_ASSIGN(TensorInfo sealed, client().Seal("lease/c"));
  EXPECT_TRUE(sealed.sealed);
  EXPECT_EQ(sealed.leases, 1u) << "the producer's Create lease lives on";
  EXPECT_EQ(LeasesOf(client(), "lease/c"), 1);
  created.reset();
  EXPECT_EQ(LeasesOf(client(), "lease/c"), 0);
  ASSERT_OK_AND_ASSIGN(BrokerStats after, client().Stats());
  EXPECT_EQ(after.pending, 0u);
  EXPECT_EQ(after.tensors, 1u);
}

TEST_F(LeaseTest, DeleteWhileLeasedUnpublishesAtOnceButHoldersKeepValidBytes) {
  ASSERT_OK_AND_ASSIGN(BrokerStats before, client().Stats());
  std::vector<float> values(300000);  // 1.2 MB
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f;
  ASSERT_OK(PutFloats(client(), "del/a", values));
  ASSERT_OK_AND_ASSIGN(BrokerStats published, client().Stats());
  EXPECT_EQ(published.tensors, before.tensors + 1);
  EXPECT_GE(published.used_bytes, before.used_bytes + values.size() * 4);

  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw, client().Get("del/a"));
  TensorPtr held(raw);
  ASSERT_OK_AND_ASSIGN(auto peer, PeerProcess::Start(socket(), {"hold", "del/a"}));
  ASSERT_OK_AND_ASSIGN(std::string line, peer.ReadLine());
  ASSERT_EQ(line, "held");

  ASSERT_OK(client().Delete("del/a"));
  EXPECT_CODE(client().Stat("del/a"), absl::StatusCode::kNotFound);
  EXPECT_CODE(client().Get("del/a"), absl::StatusCode::kNotFound);
  EXPECT_CODE(client().Delete("del/a"), absl::StatusCode::kNotFound);
  ASSERT_OK_AND_ASSIGN(std::vector<TensorInfo> listed, client().List("del/"));
  EXPECT_TRUE(listed.empty());
  ASSERT_OK_AND_ASSIGN(PeerResult other, RunPeer(socket(), {"get", "del/a"}));
  EXPECT_EQ(WEXITSTATUS(other.status), 4);
  EXPECT_EQ(other.out.rfind("error NOT_FOUND", 0), 0u) << other.out;

  EXPECT_EQ(FloatsOf(held->dl_tensor), values) << "a deleted tensor's holder keeps its bytes";
  ASSERT_OK_AND_ASSIGN(BrokerStats deleted, client().Stats());
  EXPECT_EQ(deleted.tensors, before.tensors);
  EXPECT_EQ(deleted.used_bytes, published.used_bytes) << "freed while still leased";
  EXPECT_EQ(deleted.leases, 2u);

  held.reset();
  ASSERT_OK_AND_ASSIGN(BrokerStats one_left, client().Stats());
  EXPECT_EQ(one_left.used_bytes, published.used_bytes) << "freed while the peer still holds it";
  EXPECT_EQ(one_left.leases, 1u);
  ASSERT_OK(peer.WriteLine("release"));
  ASSERT_OK_AND_ASSIGN(std::string released, peer.ReadLine());
  ASSERT_EQ(released, "released");
  ASSERT_OK_AND_ASSIGN(BrokerStats freed, client().Stats());
  EXPECT_EQ(freed.used_bytes, before.used_bytes) << "not freed after the last deleter";
  EXPECT_EQ(freed.leases, 0u);

  // The name is free for a new tensor.
  ASSERT_OK_AND_ASSIGN(TensorInfo again, PutFloats(client(), "del/a", {9}));
  EXPECT_EQ(again.shape, std::vector<int64_t>{1});
}

TEST_F(LeaseTest, ReplaceWhileLeasedKeepsOldVersionForHoldersAndPublishesTheNewOne) {
  ASSERT_OK_AND_ASSIGN(BrokerStats before, client().Stats());
  ASSERT_OK_AND_ASSIGN(TensorInfo v1, PutFloats(client(), "rep/x", std::vector<float>(1000, 1.0f)));
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw1, client().Get("rep/x"));
  TensorPtr h1(raw1);
  ASSERT_OK_AND_ASSIGN(auto peer1, PeerProcess::Start(socket(), {"hold", "rep/x"}));
  ASSERT_OK_AND_ASSIGN(std::string held, peer1.ReadLine());
  ASSERT_EQ(held, "held");
  EXPECT_EQ(LeasesOf(client(), "rep/x"), 2);

  // Without replace the name is taken, for Put and for Create.
  EXPECT_CODE(PutFloats(client(), "rep/x", std::vector<float>(1000, 9.0f)),
              absl::StatusCode::kAlreadyExists);
  EXPECT_CODE(client().Create("rep/x", {1000}, dtypes::kFloat32), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(FloatsOf(h1->dl_tensor), std::vector<float>(1000, 1.0f));

  // Put with replace: version 2.
  PutOptions replace;
  replace.replace = true;
  ASSERT_OK_AND_ASSIGN(TensorInfo v2,
                       PutFloats(client(), "rep/x", std::vector<float>(500, 2.0f), replace));
  EXPECT_GT(v2.version, v1.version);
  ASSERT_OK_AND_ASSIGN(TensorInfo stat2, client().Stat("rep/x"));
  EXPECT_EQ(stat2.version, v2.version);
  EXPECT_EQ(stat2.shape, std::vector<int64_t>{500});
  EXPECT_EQ(stat2.leases, 0u) << "leases count the current version only";
  EXPECT_EQ(FloatsOf(h1->dl_tensor), std::vector<float>(1000, 1.0f)) << "v1 holder's bytes changed";
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw2, client().Get("rep/x"));
  TensorPtr h2(raw2);
  EXPECT_EQ(FloatsOf(h2->dl_tensor), std::vector<float>(500, 2.0f));
  EXPECT_EQ(LeasesOf(client(), "rep/x"), 1);
  ASSERT_OK_AND_ASSIGN(PeerResult got2, RunPeer(socket(), {"get", "rep/x", "--expect-fill", "2"}));
  EXPECT_TRUE(WIFEXITED(got2.status) && WEXITSTATUS(got2.status) == 0)
      << DescribeWaitStatus(got2.status) << "\n"
      << got2.out;

  // Create with replace: invisible until Seal, then version 3.
  CreateOptions create_replace;
  create_replace.replace = true;
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw3,
                       client().Create("rep/x", {250}, dtypes::kFloat32, create_replace));
  TensorPtr w3(raw3);
  float* p3 = reinterpret_cast<float*>(MutableDataOf(w3->dl_tensor));
  for (int i = 0; i < 250; ++i) p3[i] = 3.0f;
  ASSERT_OK_AND_ASSIGN(TensorInfo still2, client().Stat("rep/x"));
  EXPECT_EQ(still2.version, v2.version) << "an unsealed replacement must not be visible";
  ASSERT_OK_AND_ASSIGN(TensorInfo v3, client().Seal("rep/x"));
  EXPECT_GT(v3.version, v2.version);
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw3b, client().Get("rep/x"));
  TensorPtr h3(raw3b);
  EXPECT_EQ(FloatsOf(h3->dl_tensor), std::vector<float>(250, 3.0f));
  EXPECT_EQ(LeasesOf(client(), "rep/x"), 2) << "the Create lease and one Get on v3";
  ASSERT_OK_AND_ASSIGN(PeerResult got3, RunPeer(socket(), {"get", "rep/x", "--expect-fill", "3"}));
  EXPECT_TRUE(WIFEXITED(got3.status) && WEXITSTATUS(got3.status) == 0)
      << DescribeWaitStatus(got3.status) << "\n"
      << got3.out;

  // Every holder still reads its own version.
  EXPECT_EQ(FloatsOf(h1->dl_tensor), std::vector<float>(1000, 1.0f));
  EXPECT_EQ(FloatsOf(h2->dl_tensor), std::vector<float>(500, 2.0f));
  ASSERT_OK(peer1.WriteLine("release"));
  ASSERT_OK_AND_ASSIGN(std::string released, peer1.ReadLine());
  ASSERT_EQ(released, "released");
  h1.reset();
  h2.reset();
  h3.reset();
  w3.reset();
  ASSERT_OK_AND_ASSIGN(BrokerStats after, client().Stats());
  EXPECT_EQ(after.tensors, before.tensors + 1);
  EXPECT_EQ(after.leases, 0u);
  // Only v3 (1000 bytes, rounded to the 256-byte alignment) remains allocated.
  EXPECT_EQ(after.used_bytes, before.used_bytes + 1024) << "old versions not freed";
}

TEST_F(LeaseTest, RetainSharesTheLeaseOnTheSameVersionEvenAfterReplaceAndDelete) {
  ASSERT_OK(PutFloats(client(), "retain/a", {1, 2, 3}));
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw, client().Get("retain/a"));
  TensorPtr first(raw);
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw2, client().Retain(*first));
  TensorPtr second(raw2);
  EXPECT_EQ(LeasesOf(client(), "retain/a"), 1) << "Retain is local";
  EXPECT_EQ(second->dl_tensor.data, first->dl_tensor.data) << "same mapping, same bytes";
  EXPECT_EQ(second->flags & DLPACK_FLAG_BITMASK_READ_ONLY, DLPACK_FLAG_BITMASK_READ_ONLY);
  EXPECT_EQ(FloatsOf(second->dl_tensor), (std::vector<float>{1, 2, 3}));

  // The first handle's deleter leaves the lease to the second.
  first.reset();
  EXPECT_EQ(LeasesOf(client(), "retain/a"), 1);

  // Replaced, then deleted: Retain still reaches the version `second` holds, not the name.
  PutOptions replace;
  replace.replace = true;
  ASSERT_OK(PutFloats(client(), "retain/a", {7, 7}, replace));
  ASSERT_OK(client().Delete("retain/a"));
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw3, client().Retain(*second));
  TensorPtr third(raw3);
  second.reset();
  EXPECT_EQ(FloatsOf(third->dl_tensor), (std::vector<float>{1, 2, 3}));
  ASSERT_OK_AND_ASSIGN(BrokerStats held, client().Stats());
  EXPECT_EQ(held.leases, 1u);
  third.reset();
  ASSERT_OK_AND_ASSIGN(BrokerStats after, client().Stats());
  EXPECT_EQ(after.leases, 0u);
  EXPECT_EQ(after.used_bytes, 0u) << "the old version is freed with its last lease";
}

TEST_F(LeaseTest, RetainOfAnUnsealedTensorIsWritableAndCountsOnTheSealedVersion) {
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw,
                       client().Create("retain/w", {4}, dtypes::kFloat32));
  TensorPtr created(raw);
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw2, client().Retain(*created));
  TensorPtr view(raw2);
  EXPECT_EQ(view->flags & DLPACK_FLAG_BITMASK_READ_ONLY, 0u);
  float* p = reinterpret_cast<float*>(MutableDataOf(view->dl_tensor));
  for (int i = 0; i < 4; ++i) p[i] = static_cast<float>(i) + 0.5f;
  ASSERT_OK(client().Seal("retain/w"));
  EXPECT_EQ(LeasesOf(client(), "retain/w"), 1) << "the Create lease, shared by the view";
  created.reset();
  view.reset();
  EXPECT_EQ(LeasesOf(client(), "retain/w"), 0);
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw3, client().Get("retain/w"));
  TensorPtr got(raw3);
  EXPECT_EQ(FloatsOf(got->dl_tensor), (std::vector<float>{0.5f, 1.5f, 2.5f, 3.5f}));
}

TEST_F(LeaseTest, RetainRefusesATensorFromAnotherClient) {
  ASSERT_OK(PutFloats(client(), "retain/other", {1}));
  ASSERT_OK_AND_ASSIGN(auto other, Client::Connect(socket()));
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw, other->Get("retain/other"));
  TensorPtr theirs(raw);
  EXPECT_CODE(client().Retain(*theirs), absl::StatusCode::kInvalidArgument);
  DLManagedTensorVersioned foreign{};
  EXPECT_CODE(client().Retain(foreign), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LeasesOf(client(), "retain/other"), 1);
}

}  // namespace
}  // namespace tensorbroker::testing
