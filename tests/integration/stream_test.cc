// Stream rings (tensorbroker/stream.h) against a real daemon and real reader processes: a
// reader in another process follows 1,000 frames untorn and in order; a held frame never
// changes; the writer waits only when readers hold every slot; a killed reader is forgotten;
// a reader cannot make the ring writable; a forged ring is refused, and a hostile writer's head
// is waited out; a reader waiting for a place gets one when another leaves, and one whose seat
// is deleted is told so. And the
// daemon feature streams rest on: ephemeral names go with their session.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/src/stream_layout.h"
#include "tensorbroker/stream.h"
#include "tests/integration/peer_process.h"
#include "tests/integration/test_util.h"

namespace tensorbroker::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// A bound on waits for what must come (a frame, a place, a loan): it guards against a hang and
// measures nothing, so a loaded machine never fails it.
constexpr auto kHangGuard = seconds(60);
constexpr int64_t kWords = 1024;  // 8 KiB frames of int64, every word the frame's sequence

// Stamps the loaned frame with `sequence` in every word and publishes it.
uint64_t PublishStamped(StreamWriter& writer, uint64_t sequence) {
  auto frame = writer.Loan(seconds(10));
  EXPECT_TRUE(frame.ok()) << frame.status();
  if (!frame.ok()) return 0;
  auto* words = static_cast<int64_t*>((*frame)->data);
  for (int64_t i = 0; i < kWords; ++i) words[i] = static_cast<int64_t>(sequence);
  auto published = writer.Publish();
  EXPECT_TRUE(published.ok()) << published.status();
  return published.ok() ? *published : 0;
}

// Every word of `frame` equals `value`.
bool StampedWith(const StreamFrame& frame, int64_t value) {
  const auto* words = static_cast<const int64_t*>(frame.tensor->dl_tensor.data);
  for (int64_t i = 0; i < kWords; ++i) {
    if (words[i] != value) return false;
  }
  return true;
}

// Polls `condition` for up to 10 s.
template <typename Condition>
bool Eventually(Condition condition) {
  const auto deadline = std::chrono::steady_clock::now() + seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return condition();
}

class StreamTest : public BrokerTest {
 protected:
  void TearDown() override {
    reader_clients_.clear();
    BrokerTest::TearDown();
  }

  std::unique_ptr<StreamWriter> OpenWriter(const std::string& name, StreamOptions options = {}) {
    auto writer = StreamWriter::Open(client(), name, {kWords}, dtypes::kInt64, options);
    EXPECT_TRUE(writer.ok()) << writer.status();
    return writer.ok() ? *std::move(writer) : nullptr;
  }

  // A reader on a client of its own (the fixture keeps the clients, which outlive the
  // readers); null after a failure.
  std::unique_ptr<StreamReader> OpenReader(const std::string& name,
                                           std::chrono::milliseconds timeout = kHangGuard) {
    reader_clients_.push_back(NewClient());
    auto reader = StreamReader::Open(*reader_clients_.back(), name, timeout);
    EXPECT_TRUE(reader.ok()) << reader.status();
    return reader.ok() ? *std::move(reader) : nullptr;
  }

  std::vector<std::unique_ptr<Client>> reader_clients_;
};

TEST_F(StreamTest, AReaderInAnotherProcessFollowsAThousandFramesUntornAndInOrder) {
  auto writer = OpenWriter("cam/0");
  ASSERT_NE(writer, nullptr);
  auto reader = PeerProcess::Start(socket(), {"stream-read", "cam/0"});
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_EQ(*reader->ReadLine(), "reading");
  EXPECT_EQ(writer->readers(), 1u);
  for (uint64_t s = 1; s <= 1000; ++s) {
    ASSERT_EQ(PublishStamped(*writer, s), s);
    if (s % 50 == 0) std::this_thread::sleep_for(milliseconds(1));  // let it keep up, mostly
  }
  ASSERT_TRUE(writer->Close().ok());
  auto summary = reader->ReadLine();
  ASSERT_TRUE(summary.ok()) << summary.status();
  // Every frame it saw or skipped accounts for the 1,000; none torn, none out of order.
  uint64_t frames = 0, skipped = 0;
  ASSERT_EQ(std::sscanf(summary->c_str(), "frames %lu skipped %lu", &frames, &skipped), 2)
      << *summary;
  EXPECT_EQ(frames + skipped, 1000u) << *summary;
  EXPECT_NE(summary->find(" last 1000 torn 0 unordered 0"), std::string::npos) << *summary;
  auto status = reader->Wait();
  ASSERT_TRUE(status.ok());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << DescribeWaitStatus(*status);
  // The writer's Close deleted the name.
  EXPECT_EQ(client().Stat("cam/0").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(StreamTest, AHeldFrameNeverChangesAndAReaderHoldsAtMostItsShare) {
  StreamOptions options;
  options.slots = 4;
  options.frames_per_reader = 2;
  auto writer = OpenWriter("cam/held", options);
  ASSERT_NE(writer, nullptr);
  auto reader = OpenReader("cam/held");
  ASSERT_NE(reader, nullptr);
  EXPECT_EQ(reader->shape(), std::vector<int64_t>{kWords});

  EXPECT_FALSE((*reader->Next(milliseconds(0))).has_value());  // nothing published yet
  PublishStamped(*writer, 1);
  auto first = reader->Next(kHangGuard);
  ASSERT_TRUE(first.ok() && first->has_value()) << first.status();
  EXPECT_EQ((*first)->sequence, 1u);
  EXPECT_TRUE((*first)->tensor->flags & DLPACK_FLAG_BITMASK_READ_ONLY);
  for (uint64_t s = 2; s <= 100; ++s) PublishStamped(*writer, s);
  EXPECT_TRUE(StampedWith(**first, 1));  // 99 frames later, frame 1 is still frame 1

  auto second = reader->Next(kHangGuard);
  ASSERT_TRUE(second.ok() && second->has_value()) << second.status();
  EXPECT_EQ((*second)->sequence, 100u);
  EXPECT_EQ((*second)->skipped, 98u);
  PublishStamped(*writer, 101);
  // Two held: a third is refused until one goes.
  EXPECT_EQ(reader->Next(kHangGuard).status().code(), absl::StatusCode::kResourceExhausted);
  (*first)->tensor.reset();
  auto third = reader->Next(kHangGuard);
  ASSERT_TRUE(third.ok() && third->has_value()) << third.status();
  EXPECT_EQ((*third)->sequence, 101u);
  EXPECT_TRUE(StampedWith(**second, 100));
  EXPECT_TRUE(StampedWith(**third, 101));
}

TEST_F(StreamTest, TheWriterWaitsOnlyWhileReadersHoldEverySlotItCouldRefill) {
  StreamOptions options;
  options.slots = 2;  // the newest frame, and one to refill
  auto writer = OpenWriter("cam/tight", options);
  ASSERT_NE(writer, nullptr);
  auto reader = OpenReader("cam/tight");
  ASSERT_NE(reader, nullptr);
  PublishStamped(*writer, 1);
  auto held = reader->Next(kHangGuard);
  ASSERT_TRUE(held.ok() && held->has_value());
  PublishStamped(*writer, 2);  // into the other slot; frame 1 is held, frame 2 the newest
  EXPECT_EQ(writer->Loan(milliseconds(50)).status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(StampedWith(**held, 1));
  (*held)->tensor.reset();
  EXPECT_TRUE(writer->Loan(kHangGuard).ok());
  EXPECT_EQ(*writer->Publish(), 3u);
}

TEST_F(StreamTest, AKilledReaderIsForgottenAndItsFramesGoBackToTheWriter) {
  StreamOptions options;
  options.slots = 2;
  auto writer = OpenWriter("cam/killed", options);
  ASSERT_NE(writer, nullptr);
  PublishStamped(*writer, 1);
  auto reader = PeerProcess::Start(socket(), {"stream-hold", "cam/killed"});
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_EQ(*reader->ReadLine(), "held 1");
  PublishStamped(*writer, 2);
  EXPECT_EQ(writer->Loan(milliseconds(50)).status().code(), absl::StatusCode::kDeadlineExceeded);
  reader->Signal(SIGKILL);
  ASSERT_TRUE(reader->Wait().ok());
  // The daemon deletes the dead reader's ephemeral seat; the writer drops its claims.
  EXPECT_TRUE(Eventually([&] { return writer->readers() == 0; }));
  EXPECT_TRUE(writer->Loan(kHangGuard).ok());
  EXPECT_TRUE(client().List("cam/killed/.readers/")->empty());
}

TEST_F(StreamTest, AClosedStreamEndsItsReadersAfterTheLastFrame) {
  auto writer = OpenWriter("cam/end");
  ASSERT_NE(writer, nullptr);
  auto reader = OpenReader("cam/end");
  ASSERT_NE(reader, nullptr);
  PublishStamped(*writer, 1);
  ASSERT_TRUE(writer->Close().ok());
  EXPECT_EQ(writer->Loan().status().code(), absl::StatusCode::kFailedPrecondition);
  auto last = reader->Next(kHangGuard);
  ASSERT_TRUE(last.ok() && last->has_value()) << last.status();
  EXPECT_EQ((*last)->sequence, 1u);
  EXPECT_EQ(reader->Next(kHangGuard).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(StampedWith(**last, 1));  // its frame outlives the stream
}

TEST_F(StreamTest, AReaderRefusesWhatIsNotAWellFormedRing) {
  std::vector<float> plain(2048, 1.0f);
  ASSERT_TRUE(PutFloats(client(), "not/a/ring", plain).ok());
  auto refused = StreamReader::Open(client(), "not/a/ring", milliseconds(100));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();

  // A hostile writer's ring: the right magic, then 4,000 slots claimed in 8 KiB.
  auto forged = client().Create("forged", {8192}, dtypes::kUInt8);
  ASSERT_TRUE(forged.ok());
  TensorPtr forged_tensor(*forged);
  auto* bytes = static_cast<uint8_t*>(forged_tensor->dl_tensor.data);
  std::memset(bytes, 0, 8192);
  const uint64_t magic = 0x32304e4952425454ull;
  const uint32_t slots = 4000;
  std::memcpy(bytes, &magic, sizeof(magic));
  std::memcpy(bytes + 8, &slots, sizeof(slots));
  ASSERT_TRUE(client().Seal("forged").ok());
  refused = StreamReader::Open(client(), "forged", milliseconds(100));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_NE(refused.status().message().find("slots = 4000"), std::string::npos) << refused.status();
  EXPECT_TRUE(client().Ping().ok());
}

TEST_F(StreamTest, AReaderGetsTheRingReadOnly) {
  auto writer = OpenWriter("cam/ro");
  ASSERT_NE(writer, nullptr);
  PublishStamped(*writer, 7);
  auto reader = OpenReader("cam/ro");
  ASSERT_NE(reader, nullptr);
  auto frame = reader->Next(kHangGuard);
  ASSERT_TRUE(frame.ok() && frame->has_value());
  // The page under the frame is mapped read-only in the reader: making it writable fails.
  const uintptr_t page = reinterpret_cast<uintptr_t>((*frame)->tensor->dl_tensor.data) & ~4095ul;
  EXPECT_EQ(mprotect(reinterpret_cast<void*>(page), 4096, PROT_READ | PROT_WRITE), -1);
  EXPECT_EQ(errno, EACCES);
  EXPECT_TRUE(StampedWith(**frame, 7));
}

TEST_F(StreamTest, AReaderWaitingForAPlaceGetsOneWhenAReaderLeaves) {
  StreamOptions options;
  options.max_readers = 1;
  auto writer = OpenWriter("cam/place", options);
  ASSERT_NE(writer, nullptr);
  auto first = OpenReader("cam/place");
  ASSERT_NE(first, nullptr);
  PublishStamped(*writer, 1);
  auto held = first->Next(kHangGuard);
  ASSERT_TRUE(held.ok() && held->has_value());
  // The second reader waits for the only place; the first leaves while its frame is alive
  // (its seat goes only with the frame), and the writer, idle all along, notices on its own.
  std::thread leave([&] {
    std::this_thread::sleep_for(milliseconds(300));
    first.reset();
    held->reset();
  });
  auto second = OpenReader("cam/place", seconds(10));
  leave.join();
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(writer->readers(), 1u);
  PublishStamped(*writer, 2);
  auto next = second->Next(kHangGuard);
  ASSERT_TRUE(next.ok() && next->has_value());
  EXPECT_EQ((*next)->sequence, 2u);
}

TEST_F(StreamTest, AReaderWhoseSeatIsDeletedIsToldSo) {
  auto writer = OpenWriter("cam/deleted");
  ASSERT_NE(writer, nullptr);
  auto reader = OpenReader("cam/deleted");
  ASSERT_NE(reader, nullptr);
  auto seats = client().List("cam/deleted/.readers/");
  ASSERT_TRUE(seats.ok() && seats->size() == 1u);
  ASSERT_TRUE(client().Delete((*seats)[0].name).ok());  // its owner (this uid) may
  EXPECT_TRUE(Eventually([&] { return writer->readers() == 0; }));
  PublishStamped(*writer, 1);
  EXPECT_EQ(reader->Next(kHangGuard).status().code(), absl::StatusCode::kAborted);
}

// A writer that is broken or hostile: its head names a frame whose slot says it is being
// refilled, for ever. The reader claims nothing, does not spin, and returns at its timeout.
TEST_F(StreamTest, AHeadThatNeverSettlesIsWaitedOutNotSpunOn) {
  using client_internal::RingControl;
  const uint64_t bytes = client_internal::kDataOffset + 2 * 4096;
  auto created = client().Create("cam/hostile", {static_cast<int64_t>(bytes)}, dtypes::kUInt8);
  ASSERT_TRUE(created.ok());
  TensorPtr ring(*created);
  auto* control = static_cast<RingControl*>(ring->dl_tensor.data);
  std::memset(control, 0, sizeof(RingControl));
  client_internal::RingGeometry& g = control->geometry;
  g.magic = client_internal::kRingMagic;
  g.slots = 2;
  g.max_readers = 1;
  g.frames_per_reader = 1;
  g.ndim = 1;
  g.slot_bytes = 4096;
  g.frame_nbytes = 4096;
  g.dtype_code = kDLUInt;
  g.dtype_bits = 8;
  g.dtype_lanes = 1;
  g.shape[0] = 4096;
  g.admission = 7;
  ASSERT_TRUE(client().Seal("cam/hostile").ok());
  std::unique_ptr<StreamReader> reader;
  std::thread open([&] { reader = OpenReader("cam/hostile", seconds(10)); });
  // Play the writer: accept the seat, then publish a head that never settles.
  absl::StatusOr<std::vector<TensorInfo>> seats;
  ASSERT_TRUE(Eventually([&] {
    seats = client().List("cam/hostile/.readers/");
    return seats.ok() && seats->size() == 1;
  }));
  __atomic_store_n(&control->accepted[0], (*seats)[0].version, __ATOMIC_RELEASE);
  __atomic_fetch_add(&control->gen, 1, __ATOMIC_RELEASE);
  client_internal::FutexWakeAll(&control->gen);
  open.join();
  ASSERT_NE(reader, nullptr);
  __atomic_store_n(&control->slot_seq[1], client_internal::kBusy, __ATOMIC_RELEASE);
  __atomic_store_n(&control->head, client_internal::PackHead(5, 1), __ATOMIC_RELEASE);
  const auto start = std::chrono::steady_clock::now();
  auto next = reader->Next(milliseconds(200));
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_FALSE(next->has_value());
  EXPECT_LT(took, kHangGuard);  // a guard against the spin, not a measurement
  // A head past the slots is refused outright.
  __atomic_store_n(&control->head, client_internal::PackHead(6, 9), __ATOMIC_RELEASE);
  EXPECT_EQ(reader->Next(milliseconds(200)).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(StreamTest, AnEphemeralNameGoesWithTheSessionThatCreatedIt) {
  auto watcher = client().Watch("presence/");
  ASSERT_TRUE(watcher.ok());
  auto other = NewClient();
  CreateOptions ephemeral;
  ephemeral.ephemeral = true;
  auto created = other->Create("presence/a", {16}, dtypes::kUInt8, ephemeral);
  ASSERT_TRUE(created.ok());
  ASSERT_TRUE(other->Seal("presence/a").ok());
  (*created)->deleter(*created);
  std::vector<float> lasting(4, 2.0f);
  ASSERT_TRUE(PutFloats(*other, "presence/b", lasting).ok());
  other.reset();  // its session ends
  auto published = (*watcher)->Next(seconds(10));
  ASSERT_TRUE(published.ok() && published->has_value());
  EXPECT_EQ((*published)->kind, WatchEvent::Kind::kPublished);
  EXPECT_EQ((*published)->name, "presence/a");
  auto put = (*watcher)->Next(seconds(10));
  ASSERT_TRUE(put.ok() && put->has_value());
  EXPECT_EQ((*put)->name, "presence/b");
  auto deleted = (*watcher)->Next(seconds(10));
  ASSERT_TRUE(deleted.ok() && deleted->has_value());
  EXPECT_EQ((*deleted)->kind, WatchEvent::Kind::kDeleted);
  EXPECT_EQ((*deleted)->name, "presence/a");
  EXPECT_EQ(client().Stat("presence/a").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(client().Stat("presence/b").ok());
}

}  // namespace
}  // namespace tensorbroker::testing
