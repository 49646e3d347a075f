// A principal's directory (common/directory_records.h): records written by one writer and read
// under their seqlocks, through a second, read-only mapping of the same memfd as a process
// of the uid has; probing, tombstones, a full table, headers that are not a directory; and
// readers that race the writer (run under TSan in CI) see only whole records.
#include "common/directory_records.h"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/tensor_layout.h"

namespace tensorbroker {
namespace {

// A directory in a memfd, mapped read-write (the daemon's) and read-only (a reader's).
class DirectoryTest : public ::testing::Test {
 protected:
  void Make(uint32_t records) {
    bytes_ = DirectoryBytes(records);
    fd_ = ::memfd_create("tb-directory-test", MFD_CLOEXEC);
    ASSERT_GE(fd_, 0);
    ASSERT_EQ(::ftruncate(fd_, static_cast<off_t>(bytes_)), 0);
    written_ = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    read_ = ::mmap(nullptr, bytes_, PROT_READ, MAP_SHARED, fd_, 0);
    ASSERT_NE(written_, MAP_FAILED);
    ASSERT_NE(read_, MAP_FAILED);
    ASSERT_TRUE(DirectoryWriter::Format(written_, bytes_, records).ok());
    ASSERT_TRUE(DirectoryReader::Check(read_, bytes_).ok());
    writer_ = std::make_unique<DirectoryWriter>(written_, records);
    reader_ = std::make_unique<DirectoryReader>(read_);
  }
  void TearDown() override {
    if (written_ != nullptr) ::munmap(written_, bytes_);
    if (read_ != nullptr) ::munmap(read_, bytes_);
    if (fd_ >= 0) ::close(fd_);
  }

  size_t bytes_ = 0;
  int fd_ = -1;
  void* written_ = nullptr;
  void* read_ = nullptr;
  std::unique_ptr<DirectoryWriter> writer_;
  std::unique_ptr<DirectoryReader> reader_;
};

// Every field a function of `version`, so a mix of two writes shows.
DirectoryEntry Stamped(const std::string& name, uint64_t version) {
  DirectoryEntry e;
  e.name = name;
  e.version = version;
  e.object = version * 3;
  e.segment = absl::StrCat("tb-0a1b2c3d-", version * 5);
  e.offset = version * 7;
  e.nbytes = version * 11;
  e.dtype = DLDataType{kDLFloat, 32, 1};
  e.owner_uid = static_cast<uint32_t>(4000000000u + version);  // every bit of a uid
  e.ephemeral = version % 2 == 1;
  e.has_layout = true;
  e.shape = {static_cast<int64_t>(version), 2};
  e.strides = {2, 1};
  return e;
}

void ExpectStamped(const DirectoryEntry& e, const std::string& name, uint64_t version) {
  EXPECT_EQ(e.name, name);
  EXPECT_EQ(e.version, version);
  EXPECT_EQ(e.object, version * 3);
  EXPECT_EQ(e.segment, absl::StrCat("tb-0a1b2c3d-", version * 5));
  EXPECT_EQ(e.offset, version * 7);
  EXPECT_EQ(e.nbytes, version * 11);
  EXPECT_EQ(e.dtype.code, kDLFloat);
  EXPECT_EQ(e.dtype.bits, 32);
  EXPECT_EQ(e.owner_uid, static_cast<uint32_t>(4000000000u + version));
  EXPECT_EQ(e.ephemeral, version % 2 == 1);
  EXPECT_TRUE(e.has_layout);
  EXPECT_EQ(e.shape, (std::vector<int64_t>{static_cast<int64_t>(version), 2}));
  EXPECT_EQ(e.strides, (std::vector<int64_t>{2, 1}));
}

using Lookup = DirectoryReader::Lookup;

TEST_F(DirectoryTest, ARecordReadsBackWholeAndADeleteLeavesATombstoneWithoutTheName) {
  Make(64);
  const std::string name(kMaxNameBytes, 'n');  // the longest name there is
  ASSERT_TRUE(writer_->Publish(Stamped(name, 9)).ok());
  DirectoryReader::Found found = reader_->Find(name);
  ASSERT_EQ(found.lookup, Lookup::kFound);
  ExpectStamped(found.entry, name, 9);
  EXPECT_EQ(reader_->VersionOf(name).lookup, Lookup::kFound);
  EXPECT_EQ(reader_->VersionOf(name).version, 9u);
  EXPECT_EQ(reader_->VersionOf(name.substr(1)).lookup, Lookup::kAbsent);
  EXPECT_EQ(reader_->VersionOf(name + "x").lookup, Lookup::kUnknown) << "longer than any name";
  EXPECT_EQ(found.sequence % 2, 0u);
  EXPECT_EQ(reader_->SequenceOf(found.index), found.sequence);
  EXPECT_EQ(reader_->Changes(), 1u);

  ASSERT_TRUE(writer_->Publish(Stamped(name, 10)).ok());  // a replace: the same record
  DirectoryReader::Found replaced = reader_->Find(name);
  ExpectStamped(replaced.entry, name, 10);
  EXPECT_EQ(replaced.index, found.index);
  EXPECT_GT(reader_->SequenceOf(found.index), found.sequence);  // a lease taken before: let go

  writer_->Unpublish(name);
  EXPECT_EQ(reader_->Find(name).lookup, Lookup::kAbsent);
  EXPECT_EQ(reader_->VersionOf(name).lookup, Lookup::kAbsent);
  // The tombstone keeps no byte of the name.
  const std::string bytes(static_cast<const char*>(read_), DirectoryBytes(64));
  EXPECT_EQ(bytes.find(std::string(16, 'n')), std::string::npos);
  EXPECT_EQ(reader_->Find("never").lookup, Lookup::kAbsent);
  writer_->SetOverflow(true);  // some name has no record: not found means "ask the daemon"
  EXPECT_EQ(reader_->Find("never").lookup, Lookup::kUnknown);
}

TEST_F(DirectoryTest, MoreDimensionsThanARecordHoldsAreListedWithoutALayout) {
  Make(8);
  DirectoryEntry wide = Stamped("wide", 1);
  wide.shape.assign(kRecordDims + 1, 1);
  wide.strides.assign(kRecordDims + 1, 1);
  ASSERT_TRUE(writer_->Publish(wide).ok());
  DirectoryReader::Found found = reader_->Find("wide");
  ASSERT_EQ(found.lookup, Lookup::kFound);
  EXPECT_FALSE(found.entry.has_layout);
  EXPECT_TRUE(found.entry.shape.empty());
  EXPECT_EQ(found.entry.nbytes, 11u);
}

TEST_F(DirectoryTest, AFullTableRefusesTheNextNameUntilATombstoneIsFree) {
  Make(16);
  for (int i = 0; i < 16; ++i) {
    ASSERT_TRUE(writer_->Publish(Stamped(absl::StrCat("t/", i), i + 1)).ok()) << i;
  }
  for (int i = 0; i < 16; ++i) {
    ExpectStamped(reader_->Find(absl::StrCat("t/", i)).entry, absl::StrCat("t/", i), i + 1);
  }
  EXPECT_EQ(writer_->Publish(Stamped("t/16", 17)).code(), absl::StatusCode::kResourceExhausted);
  // With every record used, a name not there is "ask the daemon", never "absent".
  EXPECT_EQ(reader_->Find("t/16").lookup, Lookup::kUnknown);
  EXPECT_EQ(reader_->VersionOf("t/16").lookup, Lookup::kUnknown);
  EXPECT_EQ(reader_->VersionOf("t/15").version, 16u);
  writer_->Unpublish("t/3");
  ASSERT_TRUE(writer_->Publish(Stamped("t/16", 17)).ok());  // t/3's tombstone, given away
  ExpectStamped(reader_->Find("t/16").entry, "t/16", 17);
  EXPECT_EQ(reader_->Find("t/3").lookup, Lookup::kUnknown);
  for (int i = 0; i < 16; ++i) {
    if (i != 3)
      ExpectStamped(reader_->Find(absl::StrCat("t/", i)).entry, absl::StrCat("t/", i), i + 1);
  }
}

TEST_F(DirectoryTest, WhatIsNotADirectoryIsRefusedBeforeAnyUse) {
  Make(8);
  std::vector<uint64_t> zeros(kDirectoryHeaderBytes / 8 + 8 * kRecordBytes / 8, 0);
  EXPECT_EQ(DirectoryReader::Check(zeros.data(), zeros.size() * 8).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DirectoryReader::Check(read_, 100).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DirectoryReader::Check(read_, bytes_ - 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DirectoryWriter::Format(written_, bytes_, 12).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DirectoryWriter::Format(written_, bytes_, 16).code(),
            absl::StatusCode::kInvalidArgument);
}

// Readers racing a writer that replaces two names as fast as it can: every record read is one
// whole write (each field a function of its version), and versions never go back.
TEST_F(DirectoryTest, ReadersRacingTheWriterSeeOnlyWholeRecordsInOrder) {
  Make(64);
  constexpr uint64_t kWrites = 20000;
  ASSERT_TRUE(writer_->Publish(Stamped("a", 1)).ok());
  ASSERT_TRUE(writer_->Publish(Stamped("b", 1)).ok());
  std::atomic<bool> done{false};
  std::vector<std::thread> readers;
  std::atomic<uint64_t> reads{0};
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&, r] {
      const std::string name = r == 0 ? "a" : "b";
      uint64_t last = 0;
      while (!done.load()) {
        DirectoryReader::Found found = reader_->Find(name);
        if (found.lookup != Lookup::kFound) continue;  // kept changing: the daemon's path
        ExpectStamped(found.entry, name, found.entry.version);
        EXPECT_GE(found.entry.version, last);
        last = found.entry.version;
        reads.fetch_add(1);
      }
    });
  }
  // The readers read all along: some before the writes, and some within every 1,000 of them
  // (each wait guarded: 60 s).
  auto reads_reach = [&](uint64_t count) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (reads.load() < count && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    return reads.load() >= count;
  };
  EXPECT_TRUE(reads_reach(1));
  for (uint64_t v = 2; v <= kWrites; ++v) {
    ASSERT_TRUE(writer_->Publish(Stamped("a", v)).ok());
    ASSERT_TRUE(writer_->Publish(Stamped("b", v)).ok());
    if (v % 1000 == 0) {
      EXPECT_TRUE(reads_reach(reads.load() + 1)) << v;
    }
  }
  done = true;
  for (std::thread& t : readers) t.join();
  ExpectStamped(reader_->Find("a").entry, "a", kWrites);
}

// Another process reads the same memfd through a read-only mapping of its own.
TEST_F(DirectoryTest, AnotherProcessReadsThroughItsOwnReadOnlyMapping) {
  Make(8);
  ASSERT_TRUE(writer_->Publish(Stamped("shared/x", 4)).ok());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    void* view = ::mmap(nullptr, bytes_, PROT_READ, MAP_SHARED, fd_, 0);
    if (view == MAP_FAILED || !DirectoryReader::Check(view, bytes_).ok()) ::_exit(2);
    const DirectoryReader::Found found = DirectoryReader(view).Find("shared/x");
    ::_exit(found.lookup == Lookup::kFound && found.entry.object == 12 ? 0 : 3);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

}  // namespace
}  // namespace tensorbroker
