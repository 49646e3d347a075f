// TensorStore state machine on a real CpuSegmentPool: create/seal/abort, replace and delete
// while leased, session close reclaiming leases and pending tensors, waits, ownership codes.
#include "daemon/store/tensor_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "daemon/memory/cpu_segment_pool.h"

namespace tensorbroker::daemon {
namespace {

// Principals as the daemon makes them from the kernel's credentials.
const Principal kRoot{0, {0}, true, {}};
const Principal kAlice{1000, {1000}, false, {}};

class RecordingSink : public SessionEventSink {
 public:
  void OnSegmentRemoved(const std::string& segment) override { removed.push_back(segment); }
  std::vector<std::string> removed;
};

class TensorStoreTest : public ::testing::Test {
 protected:
  TensorStoreTest() {
    CpuSegmentPoolOptions options;
    options.capacity_bytes = 64 << 20;
    options.name_prefix = prefix_;
    options.pooled_segment_bytes = 4 << 20;
    options.dedicated_threshold = 1 << 20;
    store_ = std::make_unique<TensorStore>(std::make_unique<CpuSegmentPool>(options));
    session_ = store_->OpenSession(kRoot, 1, "test", &sink_);
  }
  ~TensorStoreTest() override { store_.reset(); }
  static TensorSpec Spec(const std::string& name, uint64_t floats, bool replace = false) {
    TensorSpec spec;
    spec.name = name;
    spec.dtype = {kDLFloat, 32, 1};
    spec.shape = {static_cast<int64_t>(floats)};
    spec.strides = {1};
    spec.nbytes = floats * 4;
    spec.replace = replace;
    return spec;
  }
  // Create, write `value` into the first float, seal; returns the creator's lease.
  uint64_t Publish(const std::string& name, float value, bool replace = false,
                   uint64_t floats = 4) {
    auto grant = store_->Create(session_, Spec(name, floats, replace));
    EXPECT_TRUE(grant.ok()) << grant.status();
    std::memcpy(grant->block.data, &value, sizeof(value));
    EXPECT_TRUE(store_->Seal(session_, name).ok());
    return grant->lease_id;
  }

  const std::string prefix_ = absl::StrCat("tb-storetest-", ::getpid(), "-");
  RecordingSink sink_;
  std::unique_ptr<TensorStore> store_;
  std::string session_;
};

TEST_F(TensorStoreTest, CreateIsInvisibleUntilSealed) {
  auto grant = store_->Create(session_, Spec("t", 4));
  ASSERT_TRUE(grant.ok());
  EXPECT_TRUE(grant->writable);
  EXPECT_EQ(store_->Get(session_, "t", absl::InfinitePast()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Stats(kRoot).pending, 1u);
  auto sealed = store_->Seal(session_, "t");
  ASSERT_TRUE(sealed.ok());
  EXPECT_TRUE(sealed->sealed);
  EXPECT_GT(sealed->version, 0u);
  EXPECT_EQ(store_->Seal(session_, "t").status().code(), absl::StatusCode::kFailedPrecondition);
  auto got = store_->Get(session_, "t", absl::InfinitePast());
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(got->writable);
  EXPECT_EQ(got->block.segment, grant->block.segment);
  EXPECT_EQ(got->block.offset, grant->block.offset);
  EXPECT_EQ(got->info.leases, 2u);
}

TEST_F(TensorStoreTest, NameConflictsAndReplaceKeepOldVersionAlive) {
  const uint64_t creator = Publish("t", 1.f);
  EXPECT_EQ(store_->Create(session_, Spec("t", 4)).status().code(),
            absl::StatusCode::kAlreadyExists);
  auto v1 = store_->Get(session_, "t", absl::InfinitePast());
  ASSERT_TRUE(v1.ok());
  Publish("t", 2.f, /*replace=*/true);
  auto v2 = store_->Get(session_, "t", absl::InfinitePast());
  ASSERT_TRUE(v2.ok());
  EXPECT_GT(v2->info.version, v1->info.version);
  float old_value = 0, new_value = 0;
  std::memcpy(&old_value, v1->block.data, 4);
  std::memcpy(&new_value, v2->block.data, 4);
  EXPECT_EQ(old_value, 1.f);
  EXPECT_EQ(new_value, 2.f);
  const uint64_t used = store_->Stats(kRoot).used_bytes;
  EXPECT_TRUE(store_->Release(session_, creator).ok());
  EXPECT_EQ(store_->Stats(kRoot).used_bytes, used);  // v1 still leased
  EXPECT_TRUE(store_->Release(session_, v1->lease_id).ok());
  EXPECT_EQ(store_->Stats(kRoot).used_bytes, used - 256);  // now v1 is freed
}

TEST_F(TensorStoreTest, DeleteWhileLeasedFreesOnLastRelease) {
  const uint64_t creator = Publish("big", 5.f, false, 512 << 10);  // 2 MiB: dedicated segment
  auto held = store_->Get(session_, "big", absl::InfinitePast());
  ASSERT_TRUE(held.ok());
  ASSERT_TRUE(store_->Delete(kRoot, "big").ok());
  EXPECT_EQ(store_->Stat(kRoot, "big").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Delete(kRoot, "big").code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(store_->Release(session_, creator).ok());
  float value = 0;
  std::memcpy(&value, held->block.data, 4);
  EXPECT_EQ(value, 5.f);
  EXPECT_EQ(store_->Stats(kRoot).used_bytes, 2u << 20);
  EXPECT_TRUE(store_->Release(session_, held->lease_id).ok());
  EXPECT_EQ(store_->Stats(kRoot).used_bytes, 0u);
  // The idle segment is kept for reuse until capacity is short: a 63 MiB tensor needs its room.
  EXPECT_TRUE(sink_.removed.empty());
  auto large = store_->Create(session_, Spec("large", 63 << 18));
  ASSERT_TRUE(large.ok()) << large.status();
  EXPECT_EQ(sink_.removed, std::vector<std::string>{held->block.segment});
}

TEST_F(TensorStoreTest, ClosingASessionReleasesLeasesAndAbortsPending) {
  RecordingSink other_sink;
  const std::string other = store_->OpenSession(kRoot, 2, "other", &other_sink);
  Publish("t", 1.f);
  ASSERT_TRUE(store_->Get(other, "t", absl::InfinitePast()).ok());
  ASSERT_TRUE(store_->Get(other, "t", absl::InfinitePast()).ok());
  ASSERT_TRUE(store_->Create(other, Spec("unsealed", 4)).ok());
  EXPECT_EQ(store_->Stat(kRoot, "t")->leases, 3u);
  EXPECT_EQ(store_->Stats(kRoot).clients, 2u);
  store_->CloseSession(other);
  store_->CloseSession(other);  // idempotent
  EXPECT_EQ(store_->Stat(kRoot, "t")->leases, 1u);
  EXPECT_EQ(store_->Stats(kRoot).pending, 0u);
  EXPECT_EQ(store_->Stats(kRoot).clients, 1u);
  EXPECT_TRUE(store_->Create(session_, Spec("unsealed", 4)).ok());  // the name is free again
  EXPECT_EQ(store_->Get(other, "t", absl::InfinitePast()).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(TensorStoreTest, OwnershipCodes) {
  const std::string other = store_->OpenSession(kRoot, 2, "other", nullptr);
  ASSERT_TRUE(store_->Create(session_, Spec("mine", 4)).ok());
  EXPECT_EQ(store_->Seal(other, "mine").status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(store_->Abort(other, "mine").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(store_->Create(other, Spec("mine", 4)).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(store_->Seal(session_, "nothing").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Seal("bogus", "mine").status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->Delete(kRoot, "mine").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(store_->Abort(session_, "mine").ok());
  EXPECT_EQ(store_->Release(session_, 12345).code(), absl::StatusCode::kNotFound);
}

TEST_F(TensorStoreTest, GetWaitsForPublicationOrDeadline) {
  EXPECT_EQ(store_->Get(session_, "later", absl::Now() + absl::Milliseconds(30)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  std::thread producer([&] {
    absl::SleepFor(absl::Milliseconds(50));
    Publish("later", 3.f);
  });
  auto got = store_->Get(session_, "later", absl::Now() + absl::Seconds(10));
  producer.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->info.name, "later");
}

TEST_F(TensorStoreTest, ShutdownWakesWaiters) {
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(50));
    store_->Shutdown();
  });
  auto got = store_->Get(session_, "never", absl::Now() + absl::Seconds(10));
  stopper.join();
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(TensorStoreTest, PutAndReadTickets) {
  auto ticket = store_->BeginPut(kRoot, Spec("p", 2));
  ASSERT_TRUE(ticket.ok());
  const float values[2] = {1.5f, 2.5f};
  std::memcpy(ticket->data, values, 8);
  ASSERT_TRUE(store_->CommitPut(*ticket).ok());
  auto read = store_->BeginRead(kRoot, "p");
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(std::memcmp(read->data, values, 8), 0);
  EXPECT_EQ(store_->Stat(kRoot, "p")->leases, 1u);
  store_->EndRead(read->lease_id);
  EXPECT_EQ(store_->Stat(kRoot, "p")->leases, 0u);
  auto cancelled = store_->BeginPut(kRoot, Spec("q", 2));
  ASSERT_TRUE(cancelled.ok());
  store_->CancelPut(*cancelled);
  EXPECT_EQ(store_->Stat(kRoot, "q").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(TensorStoreTest, SessionsBelongToTheirUid) {
  const std::string mine = store_->OpenSession(kAlice, 2, "uid 1000", nullptr);
  EXPECT_TRUE(store_->CheckSessionUser(mine, 1000).ok());
  EXPECT_EQ(store_->CheckSessionUser(mine, 1001).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(store_->CheckSessionUser("nope", 1000).code(), absl::StatusCode::kFailedPrecondition);
  // Create takes the session's uid as the tensor's owner, whatever the spec says.
  TensorSpec spec = Spec("owned", 4);
  spec.owner_uid = 7;
  auto grant = store_->Create(mine, spec);
  ASSERT_TRUE(grant.ok()) << grant.status();
  auto other = store_->Create(session_, Spec("other", 4));  // root's
  ASSERT_TRUE(other.ok());
  EXPECT_NE(grant->block.segment, other->block.segment);
  store_->CloseSession(mine);
}

TEST_F(TensorStoreTest, GetOrWaitAnswersWithoutAThreadWhenPublished) {
  uint64_t waiter = 0;
  std::vector<absl::StatusOr<TensorGrant>> answers;
  auto now = store_->GetOrWait(session_, "later", {}, absl::Now() + absl::Seconds(30), &waiter,
                               [&](absl::StatusOr<TensorGrant> r) { answers.push_back(r); });
  EXPECT_FALSE(now.has_value());
  EXPECT_NE(waiter, 0u);
  auto created = store_->Create(session_, Spec("later", 4));
  ASSERT_TRUE(created.ok());
  EXPECT_TRUE(answers.empty());
  ASSERT_TRUE(store_->Seal(session_, "later").ok());
  ASSERT_EQ(answers.size(), 1u);
  ASSERT_TRUE(answers[0].ok()) << answers[0].status();
  EXPECT_EQ(answers[0]->info.name, "later");
  EXPECT_FALSE(answers[0]->writable);
  EXPECT_FALSE(store_->CancelWait(waiter));  // answered already
  // Published: answered at once.
  auto at_once = store_->GetOrWait(session_, "later", {}, absl::InfinitePast(), &waiter,
                                   [&](absl::StatusOr<TensorGrant>) { FAIL(); });
  ASSERT_TRUE(at_once.has_value() && at_once->ok());
  // Not published, no wait: NOT_FOUND at once.
  auto missing = store_->GetOrWait(session_, "missing", {}, absl::InfinitePast(), &waiter,
                                   [&](absl::StatusOr<TensorGrant>) { FAIL(); });
  ASSERT_TRUE(missing.has_value());
  EXPECT_EQ(missing->status().code(), absl::StatusCode::kNotFound);
  // A cancelled wait is never answered.
  auto cancelled = store_->GetOrWait(session_, "never", {}, absl::Now() + absl::Seconds(30),
                                     &waiter, [&](absl::StatusOr<TensorGrant>) { FAIL(); });
  ASSERT_FALSE(cancelled.has_value());
  EXPECT_TRUE(store_->CancelWait(waiter));
  ASSERT_TRUE(store_->Release(session_, created->lease_id).ok());
  ASSERT_TRUE(store_->Release(session_, answers[0]->lease_id).ok());
  ASSERT_TRUE(store_->Release(session_, (*at_once)->lease_id).ok());
}

// Reads the first float of a grant's bytes, then releases its lease.
float FirstFloatAndRelease(TensorStore* store, const std::string& session,
                           const absl::StatusOr<TensorGrant>& grant) {
  EXPECT_TRUE(grant.ok()) << grant.status();
  if (!grant.ok()) return -1;
  float value = 0;
  std::memcpy(&value, grant->block.data, sizeof(value));
  EXPECT_TRUE(store->Release(session, grant->lease_id).ok());
  return value;
}

TEST_F(TensorStoreTest, AfterVersionAnswersANewerVersionAtOnceElseWaitsForTheNext) {
  Publish("s", 1.0f);
  const uint64_t v1 = store_->Stat(kRoot, "s")->version;
  VersionWanted after_v1;
  after_v1.after_version = v1;
  uint64_t waiter = 0;
  // Not newer: no wait gives NOT_FOUND naming the version, a wait waits.
  auto at_once = store_->GetOrWait(session_, "s", after_v1, absl::InfinitePast(), &waiter,
                                   [&](absl::StatusOr<TensorGrant>) { FAIL(); });
  ASSERT_TRUE(at_once.has_value());
  EXPECT_EQ(at_once->status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(at_once->status().message(), absl::StrCat("name 's' has no version after ", v1));
  std::vector<absl::StatusOr<TensorGrant>> answers;
  ASSERT_FALSE(store_
                   ->GetOrWait(session_, "s", after_v1, absl::Now() + absl::Seconds(30), &waiter,
                               [&](absl::StatusOr<TensorGrant> r) { answers.push_back(r); })
                   .has_value());
  EXPECT_EQ(store_->Stats(kRoot).waiting_gets, 1u);
  // A delete is not a newer version: it keeps waiting. A new publication answers it.
  ASSERT_TRUE(store_->Delete(kRoot, "s").ok());
  EXPECT_TRUE(answers.empty());
  Publish("s", 2.0f);
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_GT(answers[0]->info.version, v1);
  EXPECT_EQ(FirstFloatAndRelease(store_.get(), session_, answers[0]), 2.0f);
  // Newer already: answered at once, with the current version.
  Publish("s", 3.0f, /*replace=*/true);
  auto newer = store_->Get(session_, "s", absl::InfinitePast(), after_v1);
  EXPECT_EQ(newer->info.version, store_->Stat(kRoot, "s")->version);
  EXPECT_EQ(FirstFloatAndRelease(store_.get(), session_, newer), 3.0f);
  // A replace wakes a waiter after the current version.
  VersionWanted after_current;
  after_current.after_version = store_->Stat(kRoot, "s")->version;
  answers.clear();
  ASSERT_FALSE(store_
                   ->GetOrWait(session_, "s", after_current, absl::Now() + absl::Seconds(30),
                               &waiter,
                               [&](absl::StatusOr<TensorGrant> r) { answers.push_back(r); })
                   .has_value());
  Publish("s", 4.0f, /*replace=*/true);
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(FirstFloatAndRelease(store_.get(), session_, answers[0]), 4.0f);
  // The blocking Get's deadline names the version it waited past.
  after_current.after_version = store_->Stat(kRoot, "s")->version;
  auto ran_out = store_->Get(session_, "s", absl::Now() + absl::Milliseconds(20), after_current);
  EXPECT_EQ(ran_out.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(ran_out.status().message(),
            absl::StrCat("name 's' was not published after version ", *after_current.after_version,
                         " before the wait ran out"));
}

TEST_F(TensorStoreTest, VersionAndAfterVersionTogetherAreRefused) {
  Publish("s", 1.0f);
  VersionWanted both;
  both.version = 1;
  both.after_version = 0;
  EXPECT_EQ(
      store_->Get(session_, "s", absl::InfinitePast(), both).status(),
      absl::InvalidArgumentError("version: give either a version or an after_version, not both"));
  VersionWanted oldest_alone;
  oldest_alone.oldest = true;
  EXPECT_EQ(store_->Get(session_, "s", absl::InfinitePast(), oldest_alone).status(),
            absl::InvalidArgumentError("oldest: needs an after_version"));
}

TEST_F(TensorStoreTest, KeepHoldsTheLastVersionsReadableByNumber) {
  TensorSpec spec = Spec("h", 4, /*replace=*/true);
  spec.keep = 3;
  std::vector<uint64_t> versions;
  for (int i = 1; i <= 5; ++i) {
    auto grant = store_->Create(session_, spec);
    ASSERT_TRUE(grant.ok()) << grant.status();
    const float value = static_cast<float>(i);
    std::memcpy(grant->block.data, &value, sizeof(value));
    auto sealed = store_->Seal(session_, "h");
    ASSERT_TRUE(sealed.ok()) << sealed.status();
    versions.push_back(sealed->version);
    // The first version stays leased by its creator: evicted, its bytes stay valid.
    if (i > 1) {
      ASSERT_TRUE(store_->Release(session_, grant->lease_id).ok());
    }
  }
  auto stat = store_->Stat(kRoot, "h");
  ASSERT_TRUE(stat.ok());
  EXPECT_EQ(stat->keep, 3u);
  EXPECT_EQ(stat->kept_versions, (std::vector<uint64_t>{versions[2], versions[3], versions[4]}));
  EXPECT_EQ(stat->version, versions[4]);
  for (int i = 2; i < 5; ++i) {
    VersionWanted exactly;
    exactly.version = versions[i];
    auto got = store_->Get(session_, "h", absl::InfinitePast(), exactly);
    EXPECT_EQ(got->info.version, versions[i]);
    EXPECT_EQ(got->info.keep, 3u);
    EXPECT_EQ(FirstFloatAndRelease(store_.get(), session_, got), static_cast<float>(i + 1));
  }
  VersionWanted evicted;
  evicted.version = versions[0];
  EXPECT_EQ(store_->Get(session_, "h", absl::Now() + absl::Seconds(30), evicted).status(),
            absl::NotFoundError(absl::StrCat("version: name 'h' does not keep version ",
                                             versions[0], " (it keeps ", versions[2], ", ",
                                             versions[3], ", ", versions[4], ")")));
  // Kept versions count: 3 kept plus the evicted one its creator still leases.
  StoreStats stats = store_->Stats(kRoot);
  EXPECT_EQ(stats.tensors, 1u);
  ASSERT_EQ(stats.users.size(), 1u);
  EXPECT_EQ(stats.users[0].tensors, 4u);
  // A smaller keep drops the oldest at once.
  spec.keep = 1;
  ASSERT_TRUE(store_->Create(session_, spec).ok());
  auto sealed = store_->Seal(session_, "h");
  ASSERT_TRUE(sealed.ok());
  EXPECT_EQ(sealed->kept_versions, std::vector<uint64_t>{sealed->version});
  // Delete unpublishes every kept version.
  ASSERT_TRUE(store_->Delete(kRoot, "h").ok());
  EXPECT_EQ(store_->Stat(kRoot, "h").status().code(), absl::StatusCode::kNotFound);
  store_->CloseSession(session_);
  EXPECT_EQ(store_->Stats(kRoot).used_bytes, 0u);
  session_ = store_->OpenSession(kRoot, 1, "test", &sink_);
}

TEST_F(TensorStoreTest, OldestStepsThroughEveryKeptVersion) {
  TensorSpec spec = Spec("h", 4, /*replace=*/true);
  spec.keep = 4;
  std::vector<uint64_t> versions;
  for (int i = 1; i <= 4; ++i) {
    auto grant = store_->Create(session_, spec);
    ASSERT_TRUE(grant.ok());
    const float value = static_cast<float>(i);
    std::memcpy(grant->block.data, &value, sizeof(value));
    versions.push_back(store_->Seal(session_, "h")->version);
    ASSERT_TRUE(store_->Release(session_, grant->lease_id).ok());
  }
  VersionWanted next;
  next.after_version = 0;
  next.oldest = true;
  for (int i = 0; i < 4; ++i) {
    auto got = store_->Get(session_, "h", absl::InfinitePast(), next);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->info.version, versions[i]);
    EXPECT_EQ(FirstFloatAndRelease(store_.get(), session_, got), static_cast<float>(i + 1));
    next.after_version = versions[i];
  }
  EXPECT_EQ(store_->Get(session_, "h", absl::InfinitePast(), next).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(TensorStoreTest, WaitsEndWithTheirSessionAndOnShutdown) {
  const std::string other = store_->OpenSession(kRoot, 3, "waiter", nullptr);
  uint64_t waiter = 0;
  std::vector<absl::Status> answers;
  auto record = [&](absl::StatusOr<TensorGrant> r) { answers.push_back(r.status()); };
  ASSERT_FALSE(store_->GetOrWait(other, "x", {}, absl::Now() + absl::Seconds(30), &waiter, record)
                   .has_value());
  store_->CloseSession(other);
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(answers[0].code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_FALSE(
      store_->GetOrWait(session_, "x", {}, absl::Now() + absl::Seconds(30), &waiter, record)
          .has_value());
  store_->Shutdown();
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_EQ(answers[1].code(), absl::StatusCode::kUnavailable);
}

TEST_F(TensorStoreTest, DescriptorsFollowTheLease) {
  auto created = store_->Create(session_, Spec("d", 4));
  ASSERT_TRUE(created.ok());
  auto writable = store_->DescriptorFor(session_, created->lease_id);
  ASSERT_TRUE(writable.ok()) << writable.status();
  EXPECT_TRUE(writable->writable);  // the creator of a pending tensor
  EXPECT_EQ(::fcntl(writable->fd.get(), F_GETFL) & O_ACCMODE, O_RDWR);
  ASSERT_TRUE(store_->Seal(session_, "d").ok());
  const std::string consumer = store_->OpenSession(kRoot, 4, "consumer", nullptr);
  auto got = store_->Get(consumer, "d", absl::InfinitePast());
  ASSERT_TRUE(got.ok());
  auto read_only = store_->DescriptorFor(consumer, got->lease_id);
  ASSERT_TRUE(read_only.ok());
  EXPECT_FALSE(read_only->writable);
  EXPECT_EQ(::fcntl(read_only->fd.get(), F_GETFL) & O_ACCMODE, O_RDONLY);
  EXPECT_EQ(read_only->segment, got->block.segment);
  // Only the lease's holder may ask; to anyone else the id is unknown.
  EXPECT_EQ(store_->DescriptorFor(session_, got->lease_id).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->DescriptorFor(consumer, 999999).status().code(), absl::StatusCode::kNotFound);
  store_->CloseSession(consumer);
  ASSERT_TRUE(store_->Release(session_, created->lease_id).ok());
}

// A store with quotas and a short pending timeout, for the tenancy rules.
class TenancyTest : public ::testing::Test {
 protected:
  TenancyTest() {
    CpuSegmentPoolOptions options;
    options.capacity_bytes = 64 << 20;
    options.name_prefix = absl::StrCat("tb-tenancytest-", ::getpid(), "-");
    options.pooled_segment_bytes = 4 << 20;
    options.dedicated_threshold = 1 << 20;
    StoreOptions store_options;
    store_options.pending_timeout = absl::Seconds(5);
    store_options.quota_for = [](uint32_t uid) {
      return uid == kBob.uid ? Quota{1024, 2} : Quota{};
    };
    store_ = std::make_unique<TensorStore>(std::make_unique<CpuSegmentPool>(options),
                                           std::move(store_options));
    alice_ = store_->OpenSession(kAlice, 1, "alice", nullptr);
    bob_ = store_->OpenSession(kBob, 2, "bob", nullptr);
  }
  TensorSpec Spec(const std::string& name, uint64_t bytes, PrincipalSet readers,
                  bool replace = false) {
    TensorSpec spec;
    spec.name = name;
    spec.dtype = {kDLUInt, 8, 1};
    spec.shape = {static_cast<int64_t>(bytes)};
    spec.strides = {1};
    spec.nbytes = bytes;
    spec.replace = replace;
    spec.readers = std::move(readers);
    return spec;
  }
  absl::Status Publish(const std::string& session, const TensorSpec& spec) {
    auto grant = store_->Create(session, spec);
    if (!grant.ok()) return grant.status();
    if (auto sealed = store_->Seal(session, spec.name); !sealed.ok()) return sealed.status();
    return store_->Release(session, grant->lease_id);
  }
  static PrincipalSet Only(const std::string& entry) {
    return *PrincipalSet::Parse({entry}, "readers");
  }

  static inline const Principal kBob{1001, {1001}, false, {}};
  std::unique_ptr<TensorStore> store_;
  std::string alice_, bob_;
};

TEST_F(TenancyTest, ATensorYouMayNotReadDoesNotExistForYou) {
  ASSERT_TRUE(Publish(alice_, Spec("secret", 8, Only("uid:1000"))).ok());
  ASSERT_TRUE(Publish(alice_, Spec("shared", 8, Only("uid:1001"))).ok());
  EXPECT_EQ(store_->Get(bob_, "secret", absl::InfinitePast()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Stat(kBob, "secret").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->BeginRead(kBob, "secret").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Delete(kBob, "secret").code(), absl::StatusCode::kNotFound);
  const ListPage page = store_->List(kBob, "", 10);
  ASSERT_EQ(page.tensors.size(), 1u);
  EXPECT_EQ(page.tensors[0].name, "shared");
  EXPECT_EQ(store_->Stats(kBob).tensors, 1u);
  EXPECT_EQ(store_->Stats(kRoot).tensors, 2u);  // an administrator sees everything
  auto got = store_->Get(bob_, "shared", absl::InfinitePast());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->info.owner_uid, 1000u);
  EXPECT_EQ(got->info.readers, std::vector<std::string>{"uid:1001"});
  // Different readers never share a segment: a descriptor reaches its whole segment.
  auto secret = store_->Get(alice_, "secret", absl::InfinitePast());
  ASSERT_TRUE(secret.ok());
  EXPECT_NE(secret->block.segment, got->block.segment);
}

TEST_F(TenancyTest, OnlyTheOwnerOrAnAdministratorReplacesOrDeletes) {
  ASSERT_TRUE(Publish(alice_, Spec("name", 8, PrincipalSet::Anyone())).ok());
  auto stolen = store_->Create(bob_, Spec("name", 8, PrincipalSet::Anyone(), /*replace=*/true));
  EXPECT_EQ(stolen.status(),
            absl::PermissionDeniedError(absl::StrCat("name 'name' belongs to ", DescribeUid(1000),
                                                     "; only its owner or an administrator "
                                                     "may replace it")));
  EXPECT_EQ(store_->Delete(kBob, "name"),
            absl::PermissionDeniedError(absl::StrCat("name 'name' belongs to ", DescribeUid(1000),
                                                     "; only its owner or an administrator "
                                                     "may delete it")));
  ASSERT_TRUE(Publish(alice_, Spec("name", 8, PrincipalSet::Anyone(), true)).ok());
  const std::string root = store_->OpenSession(kRoot, 3, "root", nullptr);
  ASSERT_TRUE(Publish(root, Spec("name", 8, PrincipalSet::Anyone(), true)).ok());
  EXPECT_EQ(store_->Stat(kBob, "name")->owner_uid, 1000u);  // still alice's name
  EXPECT_TRUE(store_->Delete(kRoot, "name").ok());
}

TEST_F(TenancyTest, AWaiterThatMayNotReadKeepsWaiting) {
  uint64_t waiter = 0;
  int answers = 0;
  auto now = store_->GetOrWait(bob_, "later", {}, absl::Now() + absl::Seconds(30), &waiter,
                               [&](absl::StatusOr<TensorGrant>) { ++answers; });
  ASSERT_FALSE(now.has_value());
  ASSERT_TRUE(Publish(alice_, Spec("later", 8, Only("uid:1000"))).ok());
  EXPECT_EQ(answers, 0);
  EXPECT_TRUE(store_->CancelWait(waiter));
}

TEST_F(TenancyTest, QuotasNameTheQuotaAndTheUsage) {
  ASSERT_TRUE(Publish(bob_, Spec("b/1", 600, PrincipalSet::Anyone())).ok());
  EXPECT_EQ(store_->Create(bob_, Spec("b/2", 600, PrincipalSet::Anyone())).status(),
            absl::ResourceExhaustedError(absl::StrCat(
                "quota-bytes: name 'b/2' needs 600 B; ", DescribeUid(1001),
                " holds 600 B in 1 tensor(s) of its quota of 1.0 KiB (release or delete "
                "tensors, or ask for a larger quota)")));
  ASSERT_TRUE(Publish(bob_, Spec("b/2", 100, PrincipalSet::Anyone())).ok());
  EXPECT_EQ(store_->Create(bob_, Spec("b/3", 1, PrincipalSet::Anyone())).status().code(),
            absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(Publish(alice_, Spec("a/1", 4096, PrincipalSet::Anyone())).ok());  // no quota
  const StoreStats stats = store_->Stats(kBob);
  ASSERT_EQ(stats.users.size(), 1u);  // only bob's own row
  EXPECT_EQ(stats.users[0].uid, 1001u);
  EXPECT_EQ(stats.users[0].bytes, 700u);
  EXPECT_EQ(stats.users[0].tensors, 2u);
  EXPECT_EQ(stats.users[0].quota_bytes, 1024u);
  EXPECT_EQ(store_->Stats(kRoot).users.size(), 2u);
  ASSERT_TRUE(store_->Delete(kBob, "b/1").ok());
  EXPECT_TRUE(Publish(bob_, Spec("b/3", 300, PrincipalSet::Anyone())).ok());
}

// A replica of a peer's tensor: the origin's owner and readers, no quota charged, a version of
// this store's own with the origin's beside it; a newer origin version replaces it, an older or
// equal one does not, and a tensor published here is never replaced by one.
TEST_F(TenancyTest, ReplicasKeepTheOriginsReadersAndChargeNoQuota) {
  auto replica = [&](const std::string& name, uint64_t bytes, uint64_t origin_version) {
    TensorSpec spec = Spec(name, bytes, Only("uid:1001"));
    spec.owner_uid = kBob.uid;
    spec.origin = ReplicaOrigin{"node-a:7070", "ipv4:10.0.0.1:7070", origin_version, 1234};
    return spec;
  };
  // 4 KiB: four times bob's quota of bytes, and two tensors at his quota of two.
  for (const char* name : {"r/1", "r/2", "r/3"}) {
    auto ticket = store_->BeginReplica(replica(name, 4096, 70));
    ASSERT_TRUE(ticket.ok()) << ticket.status();
    std::memset(ticket->data, 0x5a, ticket->nbytes);
    ASSERT_TRUE(store_->CommitPut(*ticket).ok());
  }
  auto seen = store_->Stat(kBob, "r/1");
  ASSERT_TRUE(seen.ok()) << seen.status();
  ASSERT_TRUE(seen->origin.has_value());
  EXPECT_EQ(seen->origin->peer, "node-a:7070");
  EXPECT_EQ(seen->origin->version, 70u);
  EXPECT_EQ(seen->origin->fetched_unix_ms, 1234);
  EXPECT_EQ(seen->owner_uid, 1001u);
  EXPECT_EQ(store_->Stat(kAlice, "r/1").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Stats(kBob).users[0].bytes, 0u);  // none of bob's quota
  EXPECT_TRUE(Publish(bob_, Spec("b/own", 1000, PrincipalSet::Anyone())).ok());

  EXPECT_EQ(store_->BeginReplica(replica("r/1", 8, 70)).status(),
            absl::AlreadyExistsError("name 'r/1' holds origin version 70 already"));
  EXPECT_EQ(store_->BeginReplica(replica("b/own", 8, 90)).status(),
            absl::AlreadyExistsError("name 'b/own' holds a tensor published here, not a replica"));
  auto newer = store_->BeginReplica(replica("r/1", 16, 71));
  ASSERT_TRUE(newer.ok()) << newer.status();
  auto published = store_->CommitPut(*newer);
  ASSERT_TRUE(published.ok()) << published.status();
  EXPECT_GT(published->version, seen->version);  // this store's counter, not the origin's
  EXPECT_EQ(store_->Stat(kBob, "r/1")->origin->version, 71u);
  EXPECT_EQ(store_->Stat(kBob, "r/1")->nbytes, 16u);
}

// Replicas are a cache: before a tensor of this store's own fails for capacity, the replicas no
// one leases give way, least recently leased first; a leased one stays.
TEST_F(TenancyTest, UnleasedReplicasGiveWayLeastRecentlyLeasedFirst) {
  auto replica = [&](const std::string& name) {
    TensorSpec spec = Spec(name, 20 << 20, PrincipalSet::Anyone());  // dedicated segments
    spec.origin = ReplicaOrigin{"node-a:7070", "ipv4:10.0.0.1:7070", 1, 0};
    auto ticket = store_->BeginReplica(spec);
    EXPECT_TRUE(ticket.ok()) << ticket.status();
    if (ticket.ok()) {
      EXPECT_TRUE(store_->CommitPut(*ticket).ok());
    }
  };
  replica("r/old");
  replica("r/held");
  replica("r/recent");  // 60 MiB of the 64 MiB capacity
  auto held = store_->Get(alice_, "r/held", absl::InfinitePast());
  ASSERT_TRUE(held.ok()) << held.status();
  auto recent = store_->Get(alice_, "r/recent", absl::InfinitePast());
  ASSERT_TRUE(recent.ok()) << recent.status();
  ASSERT_TRUE(store_->Release(alice_, recent->lease_id).ok());
  // 20 MiB more: r/old (never leased) goes; r/held is leased; r/recent was leased later.
  ASSERT_TRUE(Publish(alice_, Spec("a/big", 20 << 20, PrincipalSet::Anyone())).ok());
  EXPECT_EQ(store_->Stat(kRoot, "r/old").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(store_->Stat(kRoot, "r/held").ok());
  EXPECT_TRUE(store_->Stat(kRoot, "r/recent").ok());
  // 20 MiB more again: r/recent goes, r/held stays while leased.
  ASSERT_TRUE(Publish(alice_, Spec("a/big2", 20 << 20, PrincipalSet::Anyone())).ok());
  EXPECT_EQ(store_->Stat(kRoot, "r/recent").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(store_->Stat(kRoot, "r/held").ok());
  // Nothing left to give way: the next one fails for capacity.
  EXPECT_EQ(
      store_->Create(alice_, Spec("a/big3", 20 << 20, PrincipalSet::Anyone())).status().code(),
      absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(store_->Stat(kRoot, "r/held").ok());
  // Stats (administrators) count by the origin's address: 3 fetched, 2 evicted, 1 held.
  const StoreStats stats = store_->Stats(kRoot);
  ASSERT_EQ(stats.remotes.size(), 1u);
  EXPECT_EQ(stats.remotes[0].peer, "node-a:7070");
  EXPECT_EQ(stats.remotes[0].replicas, 1u);
  EXPECT_EQ(stats.remotes[0].replica_bytes, uint64_t{20} << 20);
  EXPECT_EQ(stats.remotes[0].fetches, 3u);
  EXPECT_EQ(stats.remotes[0].fetched_bytes, uint64_t{60} << 20);
  EXPECT_EQ(stats.remotes[0].evictions, 2u);
  EXPECT_TRUE(store_->Stats(kAlice).remotes.empty());  // not an administrator
  ASSERT_TRUE(store_->Release(alice_, held->lease_id).ok());
}

TEST_F(TenancyTest, PendingTensorsPastTheTimeoutAreAbortedAndTheirNamesFreed) {
  auto created = store_->Create(alice_, Spec("slow", 8, PrincipalSet::Anyone()));
  ASSERT_TRUE(created.ok());
  int expired_puts = 0;
  auto put =
      store_->BeginPut(kBob, Spec("stalled", 8, PrincipalSet::Anyone()), [&] { ++expired_puts; });
  ASSERT_TRUE(put.ok());
  EXPECT_EQ(store_->ExpirePending(absl::Now()), 0u);
  EXPECT_EQ(store_->ExpirePending(absl::Now() + absl::Seconds(6)), 2u);
  EXPECT_EQ(expired_puts, 1);
  EXPECT_EQ(store_->Stats(kRoot).pending, 0u);
  EXPECT_EQ(store_->Seal(alice_, "slow").status(),
            absl::DeadlineExceededError("name 'slow' was aborted: not sealed within the "
                                        "daemon's pending timeout (5s)"));
  EXPECT_EQ(store_->CommitPut(*put).status().code(), absl::StatusCode::kDeadlineExceeded);
  // The names are free again, and the memory goes with the last lease.
  EXPECT_TRUE(Publish(bob_, Spec("slow", 8, PrincipalSet::Anyone())).ok());
  EXPECT_TRUE(Publish(alice_, Spec("stalled", 8, PrincipalSet::Anyone())).ok());
  ASSERT_TRUE(store_->Release(alice_, created->lease_id).ok());
  EXPECT_EQ(store_->Stats(kRoot).used_bytes, 512u);  // the two 8-byte tensors, 256-aligned
}

TEST_F(TenancyTest, ListComesInPages) {
  for (int i = 0; i < 25; ++i) {
    ASSERT_TRUE(Publish(alice_, Spec(absl::StrCat("p/", 100 + i), 1, PrincipalSet::Anyone())).ok());
  }
  ASSERT_TRUE(Publish(alice_, Spec("q/x", 1, PrincipalSet::Anyone())).ok());
  std::vector<std::string> names;
  std::string token;
  int pages = 0;
  do {
    ListPage page = store_->List(kBob, "p/", 10, token);
    for (const TensorView& info : page.tensors) names.push_back(info.name);
    token = page.next_page_token;
    ++pages;
  } while (!token.empty());
  EXPECT_EQ(pages, 3);
  ASSERT_EQ(names.size(), 25u);
  EXPECT_EQ(names.front(), "p/100");
  EXPECT_EQ(names.back(), "p/124");
}

TEST_F(TenancyTest, LogicalSizeMayNotExceedTheCapacityWhateverTheStrides) {
  TensorSpec spec = Spec("huge", 1, PrincipalSet::Anyone());
  spec.shape = {int64_t{1} << 31, int64_t{1} << 31};
  spec.strides = {0, 0};
  EXPECT_EQ(store_->Create(alice_, spec).status().code(), absl::StatusCode::kInvalidArgument);
  spec.shape = {int64_t{1} << 40, int64_t{1} << 40};
  EXPECT_EQ(store_->Create(alice_, spec).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tensorbroker::daemon

namespace tensorbroker::daemon {
namespace {

// What one uid may make the daemon hold (issue 30): waiting Gets, watches and Read streams are
// bounded per uid, across its sessions; other uids are not held back; one ended frees a place.
TEST_F(TensorStoreTest, EachUidHasAtMostSoManyWaitingGets) {
  const std::string alice = store_->OpenSession(kAlice, 2, "alice", nullptr);
  const std::string alice_too = store_->OpenSession(kAlice, 3, "alice too", nullptr);
  const absl::Time later = absl::Now() + absl::Hours(1);
  std::vector<uint64_t> waiters;
  for (size_t i = 0; i < kMaxWaitingGetsPerUid; ++i) {
    uint64_t waiter = 0;
    auto now = store_->GetOrWait(i % 2 == 0 ? alice : alice_too, absl::StrCat("never/", i), {},
                                 later, &waiter, [](absl::StatusOr<TensorGrant>) {});
    ASSERT_FALSE(now.has_value()) << i;
    waiters.push_back(waiter);
  }
  uint64_t waiter = 0;
  auto refused = store_->GetOrWait(alice, "never/more", {}, later, &waiter,
                                   [](absl::StatusOr<TensorGrant>) {});
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->status(), absl::ResourceExhaustedError(absl::StrCat(
                                   "waiting Gets: uid 1000 has ", kMaxWaitingGetsPerUid,
                                   " already (the most one user may have)")));
  // Root is not held back by Alice; and Alice waits again once one of hers ended.
  EXPECT_FALSE(store_
                   ->GetOrWait(session_, "never/root", {}, later, &waiter,
                               [](absl::StatusOr<TensorGrant>) {})
                   .has_value());
  EXPECT_TRUE(store_->CancelWait(waiter));
  EXPECT_TRUE(store_->CancelWait(waiters.front()));
  EXPECT_FALSE(
      store_->GetOrWait(alice, "never/more", {}, later, &waiter, [](absl::StatusOr<TensorGrant>) {})
          .has_value());
  EXPECT_EQ(store_->Stats(kRoot).waiting_gets, kMaxWaitingGetsPerUid);
  // A session that closes answers its waits: their places free.
  store_->CloseSession(alice);
  store_->CloseSession(alice_too);
  EXPECT_EQ(store_->Stats(kRoot).waiting_gets, 0u);
  EXPECT_FALSE(store_
                   ->GetOrWait(store_->OpenSession(kAlice, 4, "again", nullptr), "never/x", {},
                               later, &waiter, [](absl::StatusOr<TensorGrant>) {})
                   .has_value());
}

TEST_F(TensorStoreTest, EachUidHasAtMostSoManyWatches) {
  std::vector<uint64_t> watchers;
  for (size_t i = 0; i < kMaxWatchesPerUid; ++i) {
    auto watcher = store_->Watch(kAlice, "w/", std::nullopt, [] {});
    ASSERT_TRUE(watcher.ok()) << i << ": " << watcher.status();
    watchers.push_back(*watcher);
  }
  EXPECT_EQ(store_->Watch(kAlice, "w/", std::nullopt, [] {}).status(),
            absl::ResourceExhaustedError(absl::StrCat("watches: uid 1000 has ", kMaxWatchesPerUid,
                                                      " already (the most one user may have)")));
  auto roots = store_->Watch(kRoot, "w/", std::nullopt, [] {});
  ASSERT_TRUE(roots.ok());
  store_->Unwatch(watchers.back());
  store_->Unwatch(watchers.back());  // twice: counted off once
  auto again = store_->Watch(kAlice, "w/", std::nullopt, [] {});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(store_->Watch(kAlice, "w/", std::nullopt, [] {}).status().code(),
            absl::StatusCode::kResourceExhausted);
  for (uint64_t watcher : watchers) store_->Unwatch(watcher);
  store_->Unwatch(*again);
  store_->Unwatch(*roots);
}

TEST_F(TensorStoreTest, EachUidHasAtMostSoManyReadsInProgress) {
  Publish("r", 1.0f);
  std::vector<uint64_t> reads;
  for (size_t i = 0; i < kMaxReadsPerUid; ++i) {
    auto read = store_->BeginRead(kAlice, "r");
    ASSERT_TRUE(read.ok()) << i << ": " << read.status();
    reads.push_back(read->lease_id);
  }
  EXPECT_EQ(
      store_->BeginRead(kAlice, "r").status(),
      absl::ResourceExhaustedError(absl::StrCat("reads in progress: uid 1000 has ", kMaxReadsPerUid,
                                                " already (the most one user may have)")));
  auto roots = store_->BeginRead(kRoot, "r");
  ASSERT_TRUE(roots.ok());
  store_->EndRead(reads.back());
  reads.pop_back();
  auto again = store_->BeginRead(kAlice, "r");
  ASSERT_TRUE(again.ok()) << again.status();
  reads.push_back(again->lease_id);
  for (uint64_t lease : reads) store_->EndRead(lease);
  store_->EndRead(roots->lease_id);
  EXPECT_EQ(store_->Stat(kRoot, "r")->leases, 1u);  // the creator's lease alone
}

}  // namespace
}  // namespace tensorbroker::daemon
