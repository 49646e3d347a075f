// Daemon lifecycle: segments are memfds, so nothing of the daemon ever appears in /dev/shm;
// SIGTERM exits 0 and removes both sockets, even with a client connected and holding a lease
// (whose mapping stays readable); after SIGKILL a new daemon starts on the same socket and
// clients map only the new instance's segments; a second daemon on a socket already served
// exits non-zero while the first keeps serving.
// /dev/shm is looked at for the names of the daemon under test only (its segments' prefix,
// a hash of its private socket's path): whatever else the machine puts there meanwhile does
// not matter, so these run beside other tests.
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_join.h"
#include "tests/integration/test_util.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace tensorbroker::testing {
namespace {

std::string Join(const std::set<std::string>& s) { return "{" + absl::StrJoin(s, ", ") + "}"; }

// The prefix of the segments of the daemon that uses `segments` (SegmentFilesUsedBy): every
// file in /dev/shm it might name starts with it. Fails the test unless they all share one.
std::string PrefixOfDaemon(const std::set<std::string>& segments) {
  std::set<std::string> prefixes;
  for (const std::string& s : segments) {
    if (std::string p = DaemonPrefixOf(s); !p.empty()) prefixes.insert(p);
  }
  EXPECT_EQ(prefixes.size(), 1u) << "segments " << Join(segments);
  return prefixes.empty() ? std::string(kSegmentPrefix) : *prefixes.begin();
}

// The segment a mapping of this process shows ("/memfd:tb-..." -> "tb-..."), or "".
std::string SegmentOf(const Mapping& m) {
  const std::string prefix = kMemfdPathPrefix;
  return m.path.rfind(prefix, 0) == 0 ? m.path.substr(prefix.size()) : "";
}

// Publishes a pooled (small) tensor, a dedicated (large) one and a mutable one; returns a lease
// on the small one.
void Populate(Client& c, const std::string& tag, TensorPtr* held) {
  std::vector<float> small(100, 1.0f);
  std::vector<int64_t> small_shape = {100};
  ASSERT_OK(c.Put(tag + "/small", HostTensor(small.data(), small_shape, dtypes::kFloat32)));
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * big,
                       c.Create(tag + "/large", {24 << 20}, dtypes::kUInt8));  // 24 MiB
  TensorPtr big_ptr(big);
  std::memset(MutableDataOf(big_ptr->dl_tensor), 0x42, 24 << 20);
  ASSERT_OK(c.Seal(tag + "/large"));
  CreateOptions mut;
  mut.is_mutable = true;
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * m,
                       c.Create(tag + "/mutable", {10}, dtypes::kInt32, mut));
  TensorPtr m_ptr(m);
  ASSERT_OK(c.Seal(tag + "/mutable"));
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * h, c.Get(tag + "/small"));
  held->reset(h);
}

TEST(LifecycleTest, SigtermExitsZeroAndRemovesItsSegmentsAndSocket) {
  ASSERT_OK_AND_ASSIGN(DaemonProcess daemon, DaemonProcess::Start({"--log-level", "warning"}));
  const std::string socket = daemon.socket_path();
  ConnectOptions options;
  options.socket_path = socket;
  options.reconnect_timeout = std::chrono::milliseconds(200);  // no daemon comes back here
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Client::Connect(options));
  TensorPtr held;
  Populate(*client, "term", &held);
  // An unsealed tensor at shutdown, too.
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * pending_raw,
                       client->Create("term/pending", {1000}, dtypes::kUInt8));
  TensorPtr pending(pending_raw);

  const std::set<std::string> used = SegmentFilesUsedBy(daemon.pid());
  EXPECT_GE(used.size(), 3u) << "a pooled, a dedicated and a mutable segment: " << Join(used);
  const std::string prefix = PrefixOfDaemon(used);
  EXPECT_EQ(ListSegmentFiles(prefix), std::set<std::string>{})
      << "the daemon named a file in /dev/shm";
  for (const std::string& s : SegmentFilesUsedBy(::getpid())) {
    EXPECT_EQ(used.count(s), 1u) << "this client maps " << s << ", which the daemon does not own";
  }
  ASSERT_TRUE(std::filesystem::exists(socket));
  ASSERT_TRUE(std::filesystem::exists(socket + ".fd"));

  ASSERT_OK_AND_ASSIGN(int status, daemon.Stop(SIGTERM));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "tensorbrokerd " << DescribeWaitStatus(status);
  EXPECT_EQ(ListSegmentFiles(prefix), std::set<std::string>{});
  EXPECT_FALSE(std::filesystem::exists(socket)) << "socket " << socket << " left behind";
  EXPECT_FALSE(std::filesystem::exists(socket + ".fd")) << "local channel socket left behind";

  // A mapping outlives the daemon: the client still reads its pages, and its deleters return.
  EXPECT_EQ(FloatsOf(held->dl_tensor), std::vector<float>(100, 1.0f));
  held.reset();
  pending.reset();
  EXPECT_EQ(client->Ping().code(), absl::StatusCode::kUnavailable);
}

TEST(LifecycleTest, SigtermWithNoClientsExitsZero) {
  ASSERT_OK_AND_ASSIGN(DaemonProcess daemon, DaemonProcess::Start({"--log-level", "warning"}));
  const std::string socket = daemon.socket_path();
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Client::Connect(socket));
    std::vector<float> v(10, 2.0f);
    std::vector<int64_t> shape = {10};
    ASSERT_OK(client->Put("quiet/a", HostTensor(v.data(), shape, dtypes::kFloat32)));
  }
  const std::string prefix = PrefixOfDaemon(SegmentFilesUsedBy(daemon.pid()));
  ASSERT_OK_AND_ASSIGN(int status, daemon.Stop(SIGTERM));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << DescribeWaitStatus(status);
  EXPECT_EQ(ListSegmentFiles(prefix), std::set<std::string>{});
  EXPECT_FALSE(std::filesystem::exists(socket));
}

TEST(LifecycleTest, RestartAfterSigkillOnTheSameSocketCleansUpBothInstances) {
  TempDir dir("tblife");
  ASSERT_FALSE(dir.path().empty());
  const std::string socket = dir.path() + "/broker.sock";

  std::set<std::string> first_segments;
  std::string prefix;  // both instances': the prefix comes from the socket's path
  {
    ASSERT_OK_AND_ASSIGN(DaemonProcess first,
                         DaemonProcess::StartOn(socket, {"--log-level", "warning"}));
    {
      ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Client::Connect(socket));
      TensorPtr held;
      Populate(*client, "first", &held);
      first_segments = SegmentFilesUsedBy(first.pid());
      ASSERT_FALSE(first_segments.empty());
      prefix = PrefixOfDaemon(first_segments);
      ASSERT_OK_AND_ASSIGN(int status, first.Stop(SIGKILL));
      EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << DescribeWaitStatus(status);
      // A killed daemon leaves nothing to clean: its segments had no names, and the pages a
      // client maps stay readable.
      EXPECT_EQ(ListSegmentFiles(prefix), std::set<std::string>{});
      EXPECT_EQ(FloatsOf(held->dl_tensor), std::vector<float>(100, 1.0f));
    }
  }

  // The second instance starts on the stale socket.
  auto second_or = DaemonProcess::StartOn(socket, {"--log-level", "warning"});
  ASSERT_TRUE(second_or.ok()) << "restart on the socket of a SIGKILLed daemon: "
                              << second_or.status();
  DaemonProcess second = *std::move(second_or);
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Client::Connect(socket));
    // A new daemon starts empty.
    EXPECT_CODE(client->Stat("first/small"), absl::StatusCode::kNotFound);
    ASSERT_OK_AND_ASSIGN(BrokerStats stats, client->Stats());
    EXPECT_EQ(stats.tensors, 0u);
    EXPECT_EQ(stats.used_bytes, 0u);
    TensorPtr held;
    Populate(*client, "second", &held);
    ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw, client->Get("second/large"));
    TensorPtr large(raw);
    EXPECT_EQ(BytesOf(large->dl_tensor), std::vector<uint8_t>(24 << 20, 0x42))
        << "this process reads other bytes than it wrote through Create";
    ASSERT_OK_AND_ASSIGN(Mapping m, FindMapping(DataOf(large->dl_tensor)));
    EXPECT_EQ(SegmentFilesUsedBy(second.pid()).count(SegmentOf(m)), 1u)
        << "Get points into " << m.path << ", not a segment of the running daemon";
    EXPECT_EQ(first_segments.count(SegmentOf(m)), 0u) << "a stale mapping of the killed instance";
    EXPECT_EQ(PrefixOfDaemon(SegmentFilesUsedBy(second.pid())), prefix);
  }
  ASSERT_OK_AND_ASSIGN(int status, second.Stop(SIGTERM));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << DescribeWaitStatus(status);
  EXPECT_EQ(ListSegmentFiles(prefix), std::set<std::string>{})
      << "files of the two instances in /dev/shm";
  EXPECT_FALSE(std::filesystem::exists(socket));
  EXPECT_FALSE(std::filesystem::exists(socket + ".fd"));
}

// A long-lived client process across a graceful daemon restart on the same socket: the new
// daemon's segments may reuse names, and what this process reads must be what it wrote.
TEST(LifecycleTest, ClientProcessOutlivingARestartedDaemonUsesTheNewSegments) {
  TempDir dir("tblife");
  ASSERT_FALSE(dir.path().empty());
  const std::string socket = dir.path() + "/broker.sock";
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round == 0 ? "first daemon" : "restarted daemon");
    ASSERT_OK_AND_ASSIGN(DaemonProcess daemon,
                         DaemonProcess::StartOn(socket, {"--log-level", "warning"}));
    {
      ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Client::Connect(socket));
      const uint8_t fill = round == 0 ? 0x11 : 0x22;
      for (int64_t n : {int64_t{4096}, int64_t{24} << 20}) {  // pooled and dedicated
        const std::string name = "restart/" + std::to_string(n);
        ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * w,
                             client->Create(name, {n}, dtypes::kUInt8));
        TensorPtr writer(w);
        std::memset(MutableDataOf(writer->dl_tensor), fill, static_cast<size_t>(n));
        ASSERT_OK(client->Seal(name));
        ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * r, client->Get(name));
        TensorPtr reader(r);
        ASSERT_OK_AND_ASSIGN(Mapping wm, FindMapping(DataOf(writer->dl_tensor)));
        ASSERT_OK_AND_ASSIGN(Mapping rm, FindMapping(DataOf(reader->dl_tensor)));
        const std::set<std::string> current = SegmentFilesUsedBy(daemon.pid());
        EXPECT_EQ(current.count(SegmentOf(wm)), 1u) << "Create points into " << wm.path;
        EXPECT_EQ(current.count(SegmentOf(rm)), 1u) << "Get points into " << rm.path;
        EXPECT_EQ(BytesOf(reader->dl_tensor), std::vector<uint8_t>(static_cast<size_t>(n), fill))
            << name << ": Get does not see what Create wrote";
        // And another process agrees.
        ASSERT_OK_AND_ASSIGN(PeerResult peer, RunPeer(socket, {"get", name}));
        ASSERT_TRUE(WIFEXITED(peer.status) && WEXITSTATUS(peer.status) == 0) << peer.out;
        const std::vector<uint8_t> want(static_cast<size_t>(n), fill);
        EXPECT_EQ(ParseFields(peer.out).at("hash"), HashBytes(want.data(), want.size())) << name;
      }
    }
    ASSERT_OK_AND_ASSIGN(int status, daemon.Stop(SIGTERM));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << DescribeWaitStatus(status);
  }
}

TEST(LifecycleTest, SecondDaemonOnTheSameSocketFailsAndTheFirstKeepsServing) {
  ASSERT_OK_AND_ASSIGN(DaemonProcess first, DaemonProcess::Start({"--log-level", "warning"}));
  const std::string socket = first.socket_path();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Client::Connect(socket));
  std::vector<float> v = {1, 2, 3};
  std::vector<int64_t> shape = {3};
  ASSERT_OK(client->Put("one/x", HostTensor(v.data(), shape, dtypes::kFloat32)));
  const std::set<std::string> first_segments = SegmentFilesUsedBy(first.pid());

  // Start the second one by hand: DaemonProcess::StartOn would take the first one's Ping as
  // success.
  std::vector<std::string> argv = {DaemonBinaryPath(), "--socket", socket, "--log-level",
                                   "warning"};
  ASSERT_OK_AND_ASSIGN(Subprocess second, Subprocess::Spawn(argv));
  const absl::StatusOr<int> status = second.Wait(absl::Seconds(30));  // then SIGKILLed
  ASSERT_TRUE(status.ok()) << "a second tensorbrokerd on a served socket did not exit";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) != 0 && WEXITSTATUS(*status) != 127)
      << "second tensorbrokerd " << DescribeWaitStatus(*status);

  // The first one is unharmed: same socket file, same tensors, same segments.
  EXPECT_TRUE(std::filesystem::exists(socket));
  EXPECT_OK(client->Ping());
  ASSERT_OK_AND_ASSIGN(TensorInfo info, client->Stat("one/x"));
  EXPECT_EQ(info.shape, std::vector<int64_t>{3});
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> fresh, Client::Connect(socket));
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw, fresh->Get("one/x"));
  TensorPtr t(raw);
  EXPECT_EQ(FloatsOf(t->dl_tensor), v);
  EXPECT_EQ(SegmentFilesUsedBy(first.pid()), first_segments) << "the second daemon changed them";
  t.reset();
  fresh.reset();
  client.reset();
  ASSERT_OK_AND_ASSIGN(int first_status, first.Stop(SIGTERM));
  EXPECT_TRUE(WIFEXITED(first_status) && WEXITSTATUS(first_status) == 0)
      << DescribeWaitStatus(first_status);
}

}  // namespace
}  // namespace tensorbroker::testing
