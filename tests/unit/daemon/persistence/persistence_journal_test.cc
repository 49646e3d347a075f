// The TensorStore's persistence journal as the service manager sees it: a real store on a real
// CpuSegmentPool, journaling through FdStoreJournal into the descriptor store that
// tests/support/service_manager_harness.h keeps. Checks what is kept, what each record says,
// the order that makes a kill at any instant safe (persistence_journal.h), that adoption
// (adoption.h) never drops from it what it adopted, and that it drops what it cannot adopt (a
// CUDA tensor on a GPU it lacks, with its slab). CUDA VMM slabs on a real GPU: tests/gpu.
#include "daemon/persistence/fd_store_journal.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/memory/cpu_segment_pool.h"
#include "daemon/persistence/adoption.h"
#include "daemon/persistence/tensor_record.h"
#include "daemon/store/tensor_store.h"
#include "tests/unit/daemon/persistence/service_manager_fixture.h"

namespace tensorbroker::daemon {
namespace {

const Principal kRoot{0, {0}, true, {}};

class PersistenceJournalTest : public ::tensorbroker::testing::WithServiceManager {
 protected:
  void SetUp() override {
    WithServiceManager::SetUp();
    journal_ = std::make_unique<FdStoreJournal>(FdStore::FromEnvironment());
    CpuSegmentPoolOptions pool;
    pool.capacity_bytes = 64 << 20;
    pool.name_prefix = absl::StrCat("tb-journaltest-", ::getpid(), "-");
    pool.pooled_segment_bytes = 4 << 20;
    pool.dedicated_threshold = 1 << 20;
    pool.journal = journal_.get();
    StoreOptions options;
    options.journal = journal_.get();
    store_ = std::make_unique<TensorStore>(std::make_unique<CpuSegmentPool>(pool), options);
    session_ = store_->OpenSession(kRoot, 1, "test", nullptr);
  }
  void TearDown() override {
    store_.reset();
    WithServiceManager::TearDown();
  }

  static TensorSpec Spec(const std::string& name, bool replace = false, bool is_mutable = false) {
    TensorSpec spec;
    spec.name = name;
    spec.dtype = {kDLFloat, 32, 1};
    spec.shape = {2, 2};
    spec.strides = {2, 1};
    spec.nbytes = 16;
    spec.replace = replace;
    spec.is_mutable = is_mutable;
    return spec;
  }
  // Creates and seals `name`; returns the creator's grant (its lease still held).
  TensorGrant Publish(const TensorSpec& spec) {
    auto grant = store_->Create(session_, spec);
    EXPECT_TRUE(grant.ok()) << grant.status();
    EXPECT_TRUE(store_->Seal(session_, spec.name).ok());
    return *grant;
  }
  // The descriptor store once every message sent so far has been read.
  std::vector<std::string> Stored() {
    harness_->Drain();
    return harness_->StoredNames();
  }
  // The FDSTORE / FDSTOREREMOVE messages in the order they came, as "+name" / "-name".
  std::vector<std::string> Changes() {
    harness_->Drain();
    std::vector<std::string> changes;
    for (const std::string& m : harness_->messages()) {
      const size_t name = m.find("FDNAME=");
      if (name == std::string::npos) continue;
      changes.push_back((absl::StartsWith(m, "FDSTOREREMOVE=1") ? "-" : "+") +
                        m.substr(name + 7, m.find('\n', name) - name - 7));
    }
    return changes;
  }

  // The CPU pool of the instance that adopts (a prefix of its own), journaling to `journal`.
  static CpuSegmentPoolOptions NextPoolOptions(PersistenceJournal* journal) {
    CpuSegmentPoolOptions options;
    options.capacity_bytes = 64 << 20;
    options.name_prefix = absl::StrCat("tb-journaltest-next-", ::getpid(), "-");
    options.journal = journal;
    return options;
  }

  std::unique_ptr<FdStoreJournal> journal_;
  std::unique_ptr<TensorStore> store_;
  std::string session_;
};

TEST_F(PersistenceJournalTest, APublishedVersionIsKeptWithItsSegmentAndSaysEverything) {
  TensorSpec spec = Spec("frames/0");
  spec.readers = *PrincipalSet::Parse({"uid:1000", "gid:27"}, "readers");
  const TensorGrant grant = Publish(spec);
  const std::string segment = SegmentFdName(grant.block.segment);
  EXPECT_EQ(Stored(), (std::vector<std::string>{"r-1", segment}));
  EXPECT_EQ(Changes(), (std::vector<std::string>{"+" + segment, "+r-1"}));

  auto record = ReadTensorRecord(harness_->StoredFds("r-1").at(0));
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_EQ(record->info().name(), "frames/0");
  EXPECT_EQ(record->info().version(), 1u);
  EXPECT_EQ(std::vector<int64_t>(record->info().shape().begin(), record->info().shape().end()),
            (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(std::vector<int64_t>(record->info().strides().begin(), record->info().strides().end()),
            (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(record->info().nbytes(), 16u);
  EXPECT_EQ(record->info().dtype().code(), kDLFloat);
  EXPECT_EQ(record->info().dtype().bits(), 32u);
  EXPECT_EQ(record->info().leases(), 0u);
  EXPECT_TRUE(record->info().sealed());
  EXPECT_EQ(record->info().owner_uid(), 0u);
  EXPECT_EQ(
      std::vector<std::string>(record->info().readers().begin(), record->info().readers().end()),
      (std::vector<std::string>{"uid:1000", "gid:27"}));
  EXPECT_EQ(record->publisher_uid(), 0u);
  EXPECT_EQ(record->segment(), grant.block.segment);
  EXPECT_EQ(record->offset(), grant.block.offset);
  EXPECT_EQ(record->block_size(), grant.block.size);
  EXPECT_EQ(record->segment_size(), grant.block.segment_size);
}

TEST_F(PersistenceJournalTest, ReplaceRecordsTheNewVersionBeforeDroppingTheOld) {
  const TensorGrant first = Publish(Spec("t"));
  Publish(Spec("t", /*replace=*/true));
  const std::string segment = SegmentFdName(first.block.segment);
  EXPECT_EQ(Changes(), (std::vector<std::string>{"+" + segment, "+r-1", "+r-2", "-r-1"}));
  EXPECT_EQ(Stored(), (std::vector<std::string>{"r-2", segment}));
  ASSERT_TRUE(store_->Delete(kRoot, "t").ok());
  // The idle pooled segment is kept for reuse; no record names it.
  EXPECT_EQ(Stored(), std::vector<std::string>{segment});
}

TEST_F(PersistenceJournalTest, PendingTensorsAreNeverRecorded) {
  auto grant = store_->Create(session_, Spec("pending"));
  ASSERT_TRUE(grant.ok()) << grant.status();
  EXPECT_EQ(Stored(), std::vector<std::string>{SegmentFdName(grant->block.segment)});
  ASSERT_TRUE(store_->Abort(session_, "pending").ok());
  EXPECT_EQ(Stored(), std::vector<std::string>{SegmentFdName(grant->block.segment)});
}

TEST_F(PersistenceJournalTest, ADeletedVersionsRecordGoesBeforeItsMemoryDoes) {
  // A mutable tensor has a segment of its own, removed with its last lease.
  const TensorGrant grant = Publish(Spec("m", false, /*is_mutable=*/true));
  const std::string segment = SegmentFdName(grant.block.segment);
  ASSERT_TRUE(store_->Delete(kRoot, "m").ok());
  EXPECT_EQ(Stored(), std::vector<std::string>{segment});  // still leased by its creator
  ASSERT_TRUE(store_->Release(session_, grant.lease_id).ok());
  EXPECT_EQ(Stored(), std::vector<std::string>{});
  EXPECT_EQ(Changes(), (std::vector<std::string>{"+" + segment, "+r-1", "-r-1", "-" + segment}));
}

TEST_F(PersistenceJournalTest, AStoppedJournalLetsTheStoreGoAndKeepsEverything) {
  const TensorGrant kept = Publish(Spec("kept"));
  const TensorGrant changing = Publish(Spec("changing", false, /*is_mutable=*/true));
  ASSERT_TRUE(store_->Release(session_, kept.lease_id).ok());
  store_->CloseSession(session_);
  journal_->Stop();
  store_.reset();  // frees every block here, mutable segments included
  EXPECT_EQ(Stored(), (std::vector<std::string>{"r-1", "r-2", SegmentFdName(kept.block.segment),
                                                SegmentFdName(changing.block.segment)}));
}

// The descriptor store keeps a second descriptor under a name beside the first, and drops by
// name. A restart handed a segment or a record name twice uses the first and must not drop the
// extra one there: that would drop what it adopted too, lost at the next start (found by
// tests/fuzz/adoption_fuzz).
TEST_F(PersistenceJournalTest, ANameHandedOverTwiceDoesNotDropWhatWasAdopted) {
  const TensorGrant grant = Publish(Spec("frames/0"));
  const std::string segment = SegmentFdName(grant.block.segment);
  ASSERT_EQ(Stored(), (std::vector<std::string>{"r-1", segment}));
  auto copy = [&](const std::string& name) {
    return UniqueFd(::fcntl(harness_->StoredFds(name).at(0), F_DUPFD_CLOEXEC, 0));
  };
  std::vector<NamedFd> handed;
  handed.push_back({segment, copy(segment)});
  handed.push_back({segment, copy(segment)});
  handed.push_back({"r-1", copy("r-1")});
  handed.push_back({"r-1", UniqueFd(::memfd_create("not-a-record", MFD_CLOEXEC))});

  CpuSegmentPool next(NextPoolOptions(journal_.get()));
  Adoption adopted = AdoptStoredDescriptors(std::move(handed), {&next}, FdStore::FromEnvironment());
  ASSERT_EQ(adopted.tensors.size(), 1u);
  EXPECT_EQ(adopted.tensors[0].spec.name, "frames/0");
  EXPECT_EQ(adopted.records_dropped, 1u);  // the second "r-1"
  EXPECT_EQ(adopted.segments_freed, 0u);
  EXPECT_EQ(Stored(), (std::vector<std::string>{"r-1", segment}));
}

// A name's history (keep) is one record per kept version: each newer version is recorded before
// the oldest goes, and the next instance adopts exactly the versions the newest one keeps.
TEST_F(PersistenceJournalTest, AKeptHistoryIsRecordedAndAdoptedVersionByVersion) {
  TensorSpec spec = Spec("h", /*replace=*/true);
  spec.keep = 3;
  const TensorGrant first = Publish(spec);
  // Versions 2, 3, 4 (version 1 expires: its event takes 5), 6 (version 2 expires: 7).
  for (int i = 0; i < 4; ++i) Publish(spec);
  const std::string segment = SegmentFdName(first.block.segment);
  EXPECT_EQ(Stored(), (std::vector<std::string>{"r-3", "r-4", "r-6", segment}));
  EXPECT_EQ(Changes(), (std::vector<std::string>{"+" + segment, "+r-1", "+r-2", "+r-3", "+r-4",
                                                 "-r-1", "+r-6", "-r-2"}));
  auto copy = [&](const std::string& name) {
    return UniqueFd(::fcntl(harness_->StoredFds(name).at(0), F_DUPFD_CLOEXEC, 0));
  };
  std::vector<NamedFd> handed;
  for (const std::string& name :
       {segment, std::string("r-3"), std::string("r-4"), std::string("r-6")}) {
    handed.push_back({name, copy(name)});
  }
  auto next = std::make_unique<CpuSegmentPool>(NextPoolOptions(nullptr));
  Adoption adopted =
      AdoptStoredDescriptors(std::move(handed), {next.get()}, FdStore::FromEnvironment());
  ASSERT_EQ(adopted.tensors.size(), 3u);
  EXPECT_EQ(adopted.records_dropped, 0u);
  TensorStore successor(std::move(next));
  for (TensorStore::AdoptedTensor& tensor : adopted.tensors) {
    ASSERT_TRUE(successor.AdoptPublished(std::move(tensor)).ok());
  }
  auto stat = successor.Stat(kRoot, "h");
  ASSERT_TRUE(stat.ok()) << stat.status();
  EXPECT_EQ(stat->version, 6u);
  EXPECT_EQ(stat->keep, 3u);
  EXPECT_EQ(stat->kept_versions, (std::vector<uint64_t>{3, 4, 6}));
  // The successor goes on where the history ends, keeping 3.
  const std::string session = successor.OpenSession(kRoot, 1, "next", nullptr);
  ASSERT_TRUE(successor.Create(session, spec).ok());
  auto sealed = successor.Seal(session, "h");
  ASSERT_TRUE(sealed.ok()) << sealed.status();
  EXPECT_EQ(sealed->version, 7u);
  EXPECT_EQ(sealed->kept_versions, (std::vector<uint64_t>{4, 6, 7}));
  successor.CloseSession(session);
}

// A name whose newest version keeps fewer versions than were handed over (a kill between
// recording it and removing the older records): only the newest `keep` are adopted, and the
// other records are dropped from the descriptor store.
TEST_F(PersistenceJournalTest, AdoptionKeepsOnlyWhatTheNewestVersionKeeps) {
  TensorSpec spec = Spec("h", /*replace=*/true);
  spec.keep = 3;
  const TensorGrant first = Publish(spec);
  Publish(spec);
  const std::string segment = SegmentFdName(first.block.segment);
  auto copy = [&](const std::string& name) {
    return UniqueFd(::fcntl(harness_->StoredFds(name).at(0), F_DUPFD_CLOEXEC, 0));
  };
  harness_->Drain();
  std::vector<NamedFd> handed;
  for (const std::string& name : {std::string("r-1"), std::string("r-2")}) {
    handed.push_back({name, copy(name)});
  }
  spec.keep = 2;  // the name keeps 2 from now on: version 1 goes at once
  Publish(spec);
  EXPECT_EQ(Stored(), (std::vector<std::string>{"r-2", "r-3", segment}));
  handed.push_back({segment, copy(segment)});
  handed.push_back({"r-3", copy("r-3")});
  CpuSegmentPool next(NextPoolOptions(nullptr));
  Adoption adopted = AdoptStoredDescriptors(std::move(handed), {&next}, FdStore::FromEnvironment());
  ASSERT_EQ(adopted.tensors.size(), 2u);
  EXPECT_EQ(adopted.tensors[0].version, 3u);
  EXPECT_EQ(adopted.tensors[0].spec.keep, 2u);
  EXPECT_EQ(adopted.tensors[1].version, 2u);
  EXPECT_EQ(adopted.records_dropped, 1u);
  EXPECT_EQ(Stored(), (std::vector<std::string>{"r-2", "r-3", segment}));
}

// A CUDA tensor's record and its VMM slab ("g-<slab>") handed to an instance that does not serve
// that GPU (here: none at all) are dropped from the descriptor store, the slab's memory with it,
// and the CPU tensors beside them are adopted as ever.
TEST_F(PersistenceJournalTest, ACudaTensorOnAGpuThisInstanceLacksIsDroppedWithItsSlab) {
  const TensorGrant grant = Publish(Spec("frames/0"));
  const std::string segment = SegmentFdName(grant.block.segment);
  JournaledTensor gpu;
  gpu.view.name = "gpu/x";
  gpu.view.dtype = {kDLFloat, 32, 1};
  gpu.view.shape = {4};
  gpu.view.strides = {1};
  gpu.view.nbytes = 16;
  gpu.view.device = {kDLCUDA, 0};
  gpu.view.sealed = true;
  gpu.view.version = 900;
  gpu.view.readers = {"*"};
  gpu.segment = "tb-gone-cuda0-0";
  gpu.segment_size = 2 << 20;
  gpu.block_size = 256;
  auto record = WriteTensorRecord(TensorRecordOf(gpu));
  ASSERT_TRUE(record.ok()) << record.status();
  harness_->Keep("r-900", *std::move(record));
  harness_->Keep(CudaSlabFdName(gpu.segment), UniqueFd(::memfd_create("slab", MFD_CLOEXEC)));
  const std::vector<std::string> before = Stored();
  ASSERT_EQ(before, (std::vector<std::string>{"g-tb-gone-cuda0-0", "r-1", "r-900", segment}));
  std::vector<NamedFd> handed;
  for (const std::string& name : before) {
    handed.push_back(
        {name, UniqueFd(::fcntl(harness_->StoredFds(name).at(0), F_DUPFD_CLOEXEC, 0))});
  }
  CpuSegmentPool next(NextPoolOptions(journal_.get()));
  Adoption adopted = AdoptStoredDescriptors(std::move(handed), {&next}, FdStore::FromEnvironment());
  ASSERT_EQ(adopted.tensors.size(), 1u);
  EXPECT_EQ(adopted.tensors[0].spec.name, "frames/0");
  EXPECT_EQ(adopted.cuda_tensors, 0u);
  EXPECT_EQ(adopted.records_dropped, 1u);
  EXPECT_EQ(adopted.segments_freed, 1u);
  EXPECT_EQ(Stored(), (std::vector<std::string>{"r-1", segment}));
}

}  // namespace
}  // namespace tensorbroker::daemon
