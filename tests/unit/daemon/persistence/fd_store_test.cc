// The pieces tensors survive restarts with, against the service manager's documented protocol
// (played by tests/support/service_manager_harness.h): FDSTORE=1 / FDSTOREREMOVE=1 through
// FdStore, LISTEN_FDS / LISTEN_FDNAMES / LISTEN_PID through TakeListenFds, and TensorRecords in
// sealed memfds that refuse to be anything else.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "daemon/base/listen_fds.h"
#include "daemon/persistence/fd_store.h"
#include "daemon/persistence/tensor_record.h"
#include "tests/support/subprocess.h"
#include "tests/unit/daemon/persistence/service_manager_fixture.h"

namespace tensorbroker::daemon {
namespace {

ino_t InodeOf(int fd) {
  struct stat st {};
  EXPECT_EQ(::fstat(fd, &st), 0);
  return st.st_ino;
}

UniqueFd Memfd() { return UniqueFd(::memfd_create("fd-store-test", MFD_CLOEXEC)); }

using FdStoreTest = ::tensorbroker::testing::WithServiceManager;

TEST(FdName, OneTo255PrintableCharactersWithoutAColon) {
  EXPECT_TRUE(ValidateFdName("seg-tb-1a2b-7").ok());
  EXPECT_TRUE(ValidateFdName(std::string(255, 'x')).ok());
  EXPECT_EQ(ValidateFdName("").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateFdName(std::string(256, 'x')).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateFdName("a:b").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateFdName("a\nFDSTOREREMOVE=1").code(), absl::StatusCode::kInvalidArgument);
}

TEST(FdStoreDisabled, WithoutANotifySocketNothingIsSentAndNothingFails) {
  ::unsetenv("NOTIFY_SOCKET");
  const FdStore store = FdStore::FromEnvironment();
  EXPECT_FALSE(store.enabled());
  UniqueFd fd = Memfd();
  EXPECT_TRUE(store.Store("seg-1", fd.get()).ok());
  EXPECT_TRUE(store.Remove("seg-1").ok());
}

TEST_F(FdStoreTest, StoredDescriptorsAreKeptByNameAndRemovedByName) {
  const FdStore store = FdStore::FromEnvironment();
  ASSERT_TRUE(store.enabled());
  UniqueFd a = Memfd(), b = Memfd();
  ASSERT_TRUE(store.Store("seg-a", a.get()).ok());
  ASSERT_TRUE(store.Store("rec-7", b.get()).ok());
  ASSERT_TRUE(
      harness_->WaitFor([&] { return harness_->StoredNames().size() == 2; }, absl::Seconds(10)));
  EXPECT_EQ(harness_->StoredNames(), (std::vector<std::string>{"rec-7", "seg-a"}));
  // The service manager holds the same open files, not copies of their contents.
  ASSERT_EQ(harness_->StoredFds("seg-a").size(), 1u);
  EXPECT_EQ(InodeOf(harness_->StoredFds("seg-a")[0]), InodeOf(a.get()));
  EXPECT_EQ(InodeOf(harness_->StoredFds("rec-7")[0]), InodeOf(b.get()));

  ASSERT_TRUE(store.Remove("seg-a").ok());
  ASSERT_TRUE(
      harness_->WaitFor([&] { return harness_->StoredNames().size() == 1; }, absl::Seconds(10)));
  EXPECT_EQ(harness_->StoredNames(), std::vector<std::string>{"rec-7"});
  EXPECT_EQ(store.Store("bad:name", a.get()).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(FdStoreTest, TheNextProcessGetsTheKeptDescriptorsFrom3OnNamedAndForItself) {
  UniqueFd kept = Memfd();
  ASSERT_TRUE(FdStore::FromEnvironment().Store("seg-1", kept.get()).ok());
  ASSERT_TRUE(
      harness_->WaitFor([&] { return harness_->StoredNames().size() == 1; }, absl::Seconds(10)));
  UniqueFd socket = Memfd();  // stands in for a listening socket: passed first
  const std::string check = absl::StrCat(
      "test \"$LISTEN_PID\" = \"$$\" && test \"$LISTEN_FDS\" = 2 && "
      "test \"$LISTEN_FDNAMES\" = grpc:seg-1 && "
      "test \"$(stat -L -c %i /proc/$$/fd/3)\" = ",
      InodeOf(socket.get()),
      " && "
      "test \"$(stat -L -c %i /proc/$$/fd/4)\" = ",
      InodeOf(kept.get()),
      " && "
      "test \"$NOTIFY_SOCKET\" = ",
      harness_->notify_socket());
  auto pid = harness_->Start({"/bin/sh", "-c", check}, {{"grpc", socket.get()}});
  ASSERT_TRUE(pid.ok()) << pid.status();
  int status = 0;
  ASSERT_EQ(::waitpid(*pid, &status, 0), *pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// TakeListenFds in a forked child that arranges descriptors 3 and 4 and the variables as a
// service manager would; the child's exit code says what it found (0: all as expected).
int TakeInChild(const std::string& listen_pid, const std::string& names) {
  auto child = testing::Subprocess::Fork([&]() -> int {
    UniqueFd a = Memfd(), b = Memfd();
    const ino_t ia = InodeOf(a.get()), ib = InodeOf(b.get());
    if (::dup2(a.get(), 3) < 0 || ::dup2(b.get(), 4) < 0) ::_exit(10);
    ::setenv("LISTEN_PID",
             listen_pid == "self" ? std::to_string(::getpid()).c_str() : listen_pid.c_str(), 1);
    ::setenv("LISTEN_FDS", "2", 1);
    ::setenv("LISTEN_FDNAMES", names.c_str(), 1);
    auto taken = TakeListenFds();
    if (!taken.ok()) ::_exit(11);
    if (std::getenv("LISTEN_FDS") != nullptr || std::getenv("LISTEN_PID") != nullptr ||
        std::getenv("LISTEN_FDNAMES") != nullptr) {
      ::_exit(12);  // a child of ours must not think they are its own
    }
    if (taken->empty()) ::_exit(20);
    if (taken->size() != 2 || (*taken)[0].name != "grpc" || (*taken)[1].name != "seg-9") {
      ::_exit(13);
    }
    if ((*taken)[0].fd.get() != 3 || InodeOf(3) != ia || InodeOf(4) != ib) ::_exit(14);
    if ((::fcntl(3, F_GETFD) & FD_CLOEXEC) == 0) ::_exit(15);
    ::_exit(0);
  });
  EXPECT_TRUE(child.ok()) << child.status();
  if (!child.ok()) return -1;
  absl::StatusOr<int> status = child->Wait();
  EXPECT_TRUE(status.ok()) << status.status();
  return status.ok() && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
}

TEST(ListenFds, TakesNamedDescriptorsMeantForThisProcessOnce) {
  EXPECT_EQ(TakeInChild("self", "grpc:seg-9"), 0);
}

TEST(ListenFds, DescriptorsMeantForAnotherProcessAreNotTaken) {
  EXPECT_EQ(TakeInChild("1", "grpc:seg-9"), 20);
}

TEST(ListenFds, NothingPassedIsNothingTaken) {
  ::unsetenv("LISTEN_FDS");
  ::unsetenv("LISTEN_PID");
  auto taken = TakeListenFds();
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_TRUE(taken->empty());
}

v1::TensorRecord SampleRecord() {
  v1::TensorRecord record;
  v1::TensorInfo* info = record.mutable_info();
  info->set_name("frames/0");
  info->add_shape(2);
  info->add_shape(3);
  info->add_strides(3);
  info->add_strides(1);
  info->set_nbytes(24);
  info->set_version(41);
  info->set_owner_uid(1000);
  info->add_readers("gid:27");
  record.set_publisher_uid(1000);
  record.set_segment("tb-1a2b3c4d-00ff-3");
  record.set_offset(4096);
  record.set_block_size(256);
  return record;
}

TEST(TensorRecord, WrittenSealedAndReadBackExactly) {
  auto fd = WriteTensorRecord(SampleRecord());
  ASSERT_TRUE(fd.ok()) << fd.status();
  auto read = ReadTensorRecord(fd->get());
  ASSERT_TRUE(read.ok()) << read.status();
  v1::TensorRecord expected = SampleRecord();
  expected.set_format(kTensorRecordFormat);
  EXPECT_EQ(read->SerializeAsString(), expected.SerializeAsString());
  // The kernel keeps it as written: no write, no resize.
  EXPECT_EQ(::pwrite(fd->get(), "x", 1, 0), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_NE(::ftruncate(fd->get(), 0), 0);
}

TEST(TensorRecord, AnythingElseIsRefusedSayingWhy) {
  // Unsealed: could change under the reader.
  UniqueFd unsealed(::memfd_create("rec", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  const std::string bytes = SampleRecord().SerializeAsString();
  ASSERT_EQ(::write(unsealed.get(), bytes.data(), bytes.size()),
            static_cast<ssize_t>(bytes.size()));
  auto refused = ReadTensorRecord(unsealed.get());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("not sealed"), std::string::npos);
  // Not a memfd at all.
  UniqueFd file(::open("/proc/self/stat", O_RDONLY | O_CLOEXEC));
  EXPECT_EQ(ReadTensorRecord(file.get()).status().code(), absl::StatusCode::kInvalidArgument);
  // Sealed garbage, a sealed empty file, another format.
  auto seal = [](const std::string& content) {
    UniqueFd fd(::memfd_create("rec", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    EXPECT_EQ(::write(fd.get(), content.data(), content.size()),
              static_cast<ssize_t>(content.size()));
    EXPECT_EQ(::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW), 0);
    return fd;
  };
  EXPECT_EQ(ReadTensorRecord(seal("\xff\xff\xff\xff garbage").get()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadTensorRecord(seal("").get()).status().code(), absl::StatusCode::kInvalidArgument);
  v1::TensorRecord future = SampleRecord();
  future.set_format(2);
  auto other = ReadTensorRecord(seal(future.SerializeAsString()).get());
  EXPECT_EQ(other.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(other.status().message().find("format 2"), std::string::npos);
  // Too big to be one of ours, on either side.
  v1::TensorRecord huge = SampleRecord();
  huge.mutable_info()->set_name(std::string(kMaxTensorRecordBytes, 'n'));
  EXPECT_EQ(WriteTensorRecord(huge).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      ReadTensorRecord(seal(std::string(kMaxTensorRecordBytes + 1, '\0')).get()).status().code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tensorbroker::daemon
