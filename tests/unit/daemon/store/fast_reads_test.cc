// TensorStore's side of reads without a round trip on a real CpuSegmentPool, through the same
// descriptors a client maps: the directory follows publications, replacements and deletions
// and shows only what its principal may read; a lease table's slot keeps a version no name or
// granted lease keeps, until the slot is cleared or its session ends; a slot of a principal that
// may not read a version pins nothing.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/directory_records.h"
#include "common/lease_slots.h"
#include "daemon/memory/cpu_segment_pool.h"
#include "daemon/store/tensor_store.h"

namespace tensorbroker::daemon {
namespace {

const Principal kAlice{1000, {1000}, false, {}};
const Principal kBob{1001, {1001}, false, {}};

// One mmap of a fast-read file, unmapped (and its descriptor closed) with the object.
class Mapped {
 public:
  explicit Mapped(SegmentDescriptor descriptor)
      : descriptor_(std::move(descriptor)),
        data_(::mmap(nullptr, descriptor_.size,
                     descriptor_.writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED,
                     descriptor_.fd.get(), 0)) {}
  ~Mapped() {
    if (data_ != MAP_FAILED) ::munmap(data_, descriptor_.size);
  }
  void* data() const { return data_ == MAP_FAILED ? nullptr : data_; }
  uint64_t size() const { return descriptor_.size; }

 private:
  SegmentDescriptor descriptor_;
  void* data_;
};

class FastReadsTest : public ::testing::Test {
 protected:
  FastReadsTest() {
    CpuSegmentPoolOptions options;
    options.capacity_bytes = 64 << 20;
    options.name_prefix = absl::StrCat("tb-fastreadstest-", ::getpid(), "-");
    options.pooled_segment_bytes = 4 << 20;
    options.dedicated_threshold = 1 << 20;
    store_ = std::make_unique<TensorStore>(std::make_unique<CpuSegmentPool>(options));
    alice_ = store_->OpenSession(kAlice, 1, "alice", nullptr);
    bob_ = store_->OpenSession(kBob, 2, "bob", nullptr);
  }

  // Publishes 64 bytes under `name` as alice (readers: `readers`), keeping no lease.
  TensorView Publish(const std::string& name, const std::string& readers, bool replace = false) {
    TensorSpec spec;
    spec.name = name;
    spec.dtype = {kDLUInt, 8, 1};
    spec.shape = {64};
    spec.strides = {1};
    spec.nbytes = 64;
    spec.replace = replace;
    spec.owner_uid = kAlice.uid;
    spec.readers = *PrincipalSet::Parse({readers}, "readers");
    auto grant = store_->Create(alice_, spec);
    EXPECT_TRUE(grant.ok()) << grant.status();
    auto sealed = store_->Seal(alice_, name);
    EXPECT_TRUE(sealed.ok()) << sealed.status();
    EXPECT_TRUE(store_->Release(alice_, grant->lease_id).ok());
    return *sealed;
  }

  // The session's directory and lease table, mapped as its process maps them.
  std::unique_ptr<Mapped> Open(const std::string& session, FastReadFile which) {
    EXPECT_TRUE(store_->OpenFastReads(session).ok());
    auto descriptor = store_->FastReadDescriptor(session, which);
    EXPECT_TRUE(descriptor.ok()) << descriptor.status();
    if (!descriptor.ok()) return nullptr;
    auto mapped = std::make_unique<Mapped>(*std::move(descriptor));
    EXPECT_NE(mapped->data(), nullptr);
    return mapped;
  }

  std::unique_ptr<TensorStore> store_;
  std::string alice_, bob_;
};

TEST_F(FastReadsTest, TheDirectoryFollowsEveryEventAndShowsOnlyWhatItsPrincipalMayRead) {
  const TensorView first = Publish("d/shared", "uid:1001");
  Publish("d/alices", "uid:1000");
  std::unique_ptr<Mapped> bobs = Open(bob_, FastReadFile::kDirectory);
  ASSERT_TRUE(DirectoryReader::Check(bobs->data(), bobs->size()).ok());
  DirectoryReader directory(bobs->data());
  DirectoryReader::Found found = directory.Find("d/shared");
  ASSERT_EQ(found.lookup, DirectoryReader::Lookup::kFound);
  EXPECT_EQ(found.entry.version, first.version);
  EXPECT_TRUE(found.entry.has_layout);
  EXPECT_EQ(found.entry.nbytes, 64u);
  EXPECT_EQ(directory.Find("d/alices").lookup, DirectoryReader::Lookup::kAbsent);

  const TensorView second = Publish("d/shared", "uid:1001", /*replace=*/true);
  EXPECT_EQ(directory.Find("d/shared").entry.version, second.version);
  Publish("d/later", "*");
  EXPECT_EQ(directory.Find("d/later").lookup, DirectoryReader::Lookup::kFound);
  Publish("d/shared", "uid:1000", /*replace=*/true);  // bob may read it no more
  EXPECT_EQ(directory.Find("d/shared").lookup, DirectoryReader::Lookup::kAbsent);
  ASSERT_TRUE(store_->Delete(kAlice, "d/later").ok());
  EXPECT_EQ(directory.Find("d/later").lookup, DirectoryReader::Lookup::kAbsent);
  // A descriptor of a file the session did not open is refused.
  EXPECT_EQ(store_->FastReadDescriptor(alice_, FastReadFile::kLeaseTable).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(FastReadsTest, ASlotKeepsAVersionUntilClearedOrItsSessionEnds) {
  Publish("s/a", "uid:1001");
  std::unique_ptr<Mapped> directory_map = Open(bob_, FastReadFile::kDirectory);
  std::unique_ptr<Mapped> table_map = Open(bob_, FastReadFile::kLeaseTable);
  ASSERT_TRUE(LeaseSlots::Check(table_map->data(), table_map->size()).ok());
  DirectoryReader directory(directory_map->data());
  LeaseSlots table(table_map->data());
  const uint64_t object = directory.Find("s/a").entry.object;
  std::optional<uint32_t> slot = table.Take(object);
  ASSERT_TRUE(slot.has_value());
  EXPECT_EQ(store_->Stat(kAlice, "s/a")->leases, 1u);

  ASSERT_TRUE(store_->Delete(kAlice, "s/a").ok());
  EXPECT_EQ(store_->Stats(kAlice).used_bytes, 256u) << "the slot keeps it";
  EXPECT_EQ(store_->Stats(kAlice).leases, 1u);
  table.Give(*slot);
  EXPECT_EQ(store_->Stats(kAlice).used_bytes, 0u) << "freed once the slot is clear";

  Publish("s/b", "uid:1001");
  ASSERT_TRUE(table.Take(directory.Find("s/b").entry.object).has_value());
  ASSERT_TRUE(store_->Delete(kAlice, "s/b").ok());
  EXPECT_EQ(store_->Stats(kAlice).used_bytes, 256u);
  store_->CloseSession(bob_);  // its table pins nothing from now on
  EXPECT_EQ(store_->Stats(kAlice).used_bytes, 0u);
  EXPECT_EQ(store_->Stats(kAlice).leases, 0u);
}

TEST_F(FastReadsTest, ASlotOfAPrincipalThatMayNotReadTheVersionPinsNothing) {
  Publish("p/alices", "uid:1000");
  std::unique_ptr<Mapped> alices_directory = Open(alice_, FastReadFile::kDirectory);
  const uint64_t object = DirectoryReader(alices_directory->data()).Find("p/alices").entry.object;
  ASSERT_NE(object, 0u);
  std::unique_ptr<Mapped> bobs_table = Open(bob_, FastReadFile::kLeaseTable);
  LeaseSlots table(bobs_table->data());
  ASSERT_TRUE(table.Take(object).has_value());
  EXPECT_EQ(store_->Stat(kAlice, "p/alices")->leases, 0u);
  ASSERT_TRUE(store_->Delete(kAlice, "p/alices").ok());
  EXPECT_EQ(store_->Stats(kAlice).used_bytes, 0u);
}

TEST_F(FastReadsTest, AWholeTableOfPinnedVersionsCostsAReplaceOneScanNotOnePerVersion) {
  std::unique_ptr<Mapped> directory_map = Open(bob_, FastReadFile::kDirectory);
  std::unique_ptr<Mapped> table_map = Open(bob_, FastReadFile::kLeaseTable);
  DirectoryReader directory(directory_map->data());
  LeaseSlots table(table_map->data());
  // bob holds every version of a name replaced kLeaseSlotsPerTable times: his whole quota.
  for (uint32_t i = 0; i < kLeaseSlotsPerTable; ++i) {
    Publish("h/n", "uid:1001", /*replace=*/i > 0);
    ASSERT_TRUE(table.Take(directory.Find("h/n").entry.object).has_value()) << i;
  }
  EXPECT_EQ(store_->Stats(kAlice).used_bytes, 256u * kLeaseSlotsPerTable);

  // Each unpublication asks the one table twice (about the version going, then about every
  // version waiting), not once per waiting version.
  constexpr uint64_t kReplaces = 100;
  const uint64_t scans_before = store_->LeaseTableScans();
  for (uint64_t i = 0; i < kReplaces; ++i) Publish("h/n", "uid:1001", /*replace=*/true);
  EXPECT_LE(store_->LeaseTableScans() - scans_before, 2 * kReplaces);
  EXPECT_EQ(store_->Stats(kAlice).used_bytes, 256u * (kLeaseSlotsPerTable + 1))
      << "the versions held stay; the unheld replaced ones are freed";
  EXPECT_EQ(store_->Stats(kAlice).leases, kLeaseSlotsPerTable);

  for (uint32_t slot = 0; slot < kLeaseSlotsPerTable; ++slot) table.Give(slot);
  EXPECT_EQ(store_->Stats(kAlice).used_bytes, 256u) << "all but the current version freed";
  EXPECT_EQ(store_->Stats(kAlice).leases, 0u);
}

// Issue 44: the tables of a user who takes nothing cost the daemon no scan, however many there
// are (each is skipped while its count of takes has not moved since it was seen empty), and a
// session's end scans none; a table that took and gave back is scanned once more, then skipped.
TEST_F(FastReadsTest, TablesThatTakeNothingAreNeverScanned) {
  std::vector<std::string> idle;
  for (int i = 0; i < 10; ++i) {
    idle.push_back(store_->OpenSession(kBob, 100 + i, "idle", nullptr));
    ASSERT_TRUE(store_->OpenFastReads(idle.back()).ok());
  }
  std::unique_ptr<Mapped> directory_map = Open(bob_, FastReadFile::kDirectory);
  std::unique_ptr<Mapped> table_map = Open(bob_, FastReadFile::kLeaseTable);
  DirectoryReader directory(directory_map->data());
  LeaseSlots table(table_map->data());
  const uint64_t before = store_->LeaseTableScans();
  for (int i = 0; i < 100; ++i) Publish("i/n", "*", /*replace=*/i > 0);
  EXPECT_EQ(store_->Stat(kAlice, "i/n")->leases, 0u);
  EXPECT_EQ(store_->Stats(kAlice).leases, 0u);
  EXPECT_EQ(store_->LeaseTableScans(), before) << "11 tables, none ever took a slot";

  // bob's table takes and gives back: scanned once (found empty), then skipped again.
  const std::optional<uint32_t> slot = table.Take(directory.Find("i/n").entry.object);
  ASSERT_TRUE(slot.has_value());
  EXPECT_EQ(store_->Stat(kAlice, "i/n")->leases, 1u);
  EXPECT_EQ(store_->LeaseTableScans(), before + 1);
  table.Give(*slot);
  for (int i = 0; i < 10; ++i) Publish("i/n", "*", /*replace=*/true);
  EXPECT_EQ(store_->LeaseTableScans(), before + 2);
  for (const std::string& session : idle) store_->CloseSession(session);
  EXPECT_EQ(store_->LeaseTableScans(), before + 2) << "a session's end scans nothing";
  EXPECT_EQ(store_->Stats(kAlice).used_bytes, 256u);
}

}  // namespace
}  // namespace tensorbroker::daemon
