// Tenancy, proven as the right principal (issue 12): names belong to the uid that first
// published them, readers decide who sees a tensor, quotas bound each uid, pending work times
// out, lease ids tell nothing about other sessions, and List pages through thousands of names.
// Root acts in this process; uid 65534 (with the socket's group 0, so that it may connect, and
// the supplementary groups a test gives it) is tensorbroker_tenancy_peer, a child driven one
// command at a time (tenancy_peer.cc). The daemon runs at log level info with its stderr in a
// file, so that the log lines about who deleted, replaced or timed out can be read back.
// Every refusal is checked for its exact gRPC code and message, the victim's bytes afterwards,
// and the daemon for serving on.
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/byte_size.h"
#include "common/user_names.h"
#include "tensorbroker/v1/broker.grpc.pb.h"
#include "tests/integration/raw_session.h"
#include "tests/integration/test_util.h"
#include "tests/integration/uid_process.h"
#include "tests/support/daemon_wait.h"
#include "tests/support/subprocess.h"

namespace tensorbroker::testing {
namespace {

constexpr uid_t kNobody = 65534;

// tensorbrokerd as a child of the test, at log level info, with its stderr in a file beside its
// socket, in a fresh directory others may search (uid 65534 must reach the socket). The
// destructor stops it and removes the directory.
class LoggedDaemon {
 public:
  // `config` becomes the daemon's --config file (empty: an empty file, so that no system-wide
  // file is read).
  static absl::StatusOr<std::unique_ptr<LoggedDaemon>> Start(const std::vector<std::string>& args,
                                                             const std::string& config) {
    std::string dir = (std::filesystem::temp_directory_path() / "tbtenancy.XXXXXX").string();
    if (::mkdtemp(dir.data()) == nullptr) {
      return absl::InternalError(absl::StrCat("mkdtemp: ", std::strerror(errno)));
    }
    std::unique_ptr<LoggedDaemon> daemon(new LoggedDaemon(dir));
    if (::chmod(dir.c_str(), 0755) != 0) {
      return absl::InternalError(absl::StrCat("chmod ", dir, ": ", std::strerror(errno)));
    }
    const std::string config_path = dir + "/tensorbrokerd.conf";
    std::ofstream(config_path) << config;
    UniqueFd log(::open(daemon->log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!log.valid()) return absl::InternalError(absl::StrCat("open log: ", std::strerror(errno)));
    std::vector<std::string> argv = {DaemonBinaryPath(), "--socket", daemon->socket_,
                                     "--log-level",      "info",     "--config",
                                     config_path};
    argv.insert(argv.end(), args.begin(), args.end());
    SubprocessOptions options;
    options.stderr_fd = log.get();
    options.death_signal = SIGTERM;
    auto process = Subprocess::Spawn(argv, options);
    if (!process.ok()) return process.status();
    daemon->process_ = *std::move(process);
    if (absl::Status s = daemon->WaitUntilServing(); !s.ok()) return s;
    return daemon;
  }

  ~LoggedDaemon() {
    if (process_.pid() > 0) (void)Stop();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  LoggedDaemon(const LoggedDaemon&) = delete;
  LoggedDaemon& operator=(const LoggedDaemon&) = delete;

  const std::string& socket() const { return socket_; }
  const std::string& dir() const { return dir_; }
  std::string Log() const { return ReadLogFile(log_path_); }
  // Waits until the log has a line containing `text` (the bound only guards against a line that
  // never comes); fails at once when the daemon exits first.
  absl::Status WaitForLogLine(const std::string& text, absl::Duration deadline) {
    return WaitForDaemon(
        Watched(), absl::StrCat("logging '", text, "'"),
        [&] {
          return absl::StrContains(Log(), text) ? absl::OkStatus()
                                                : absl::NotFoundError("no such line yet");
        },
        deadline);
  }

  // SIGTERM, then its wait status; SIGKILL after 30 s (a hang guard: gRPC's own shutdown may
  // take some 10 s after a large Read).
  absl::StatusOr<int> Stop() {
    if (process_.pid() <= 0) return absl::FailedPreconditionError("not running");
    absl::StatusOr<int> status = process_.Stop(SIGTERM, absl::Seconds(30));
    if (absl::IsDeadlineExceeded(status.status())) {
      return absl::DeadlineExceededError("tensorbrokerd did not exit within 30 s; killed it");
    }
    return status;
  }

 private:
  explicit LoggedDaemon(std::string dir)
      : dir_(std::move(dir)), socket_(dir_ + "/broker.sock"), log_path_(dir_ + "/daemon.log") {}

  // The daemon as WaitForDaemon watches it.
  WatchedDaemon Watched() {
    return {[this] { return process_.ExitStatus(); }, [this] { return Log(); }};
  }

  absl::Status WaitUntilServing() {
    return WaitForDaemon(Watched(), absl::StrCat("serving on ", socket_),
                         [this] { return PingOn(socket_); });
  }

  const std::string dir_;
  const std::string socket_;
  const std::string log_path_;
  Subprocess process_;
};

// One answer of the tenancy peer: "code=N key=value ... msg=MESSAGE".
struct Reply {
  int code = -1;
  std::map<std::string, std::string> fields;
  std::string message;
  std::string line;  // as printed, for failure messages

  const std::string& operator[](const std::string& key) const {
    static const std::string kNone = "<absent>";
    auto it = fields.find(key);
    return it == fields.end() ? kNone : it->second;
  }
};

Reply ParseReply(const std::string& line) {
  Reply reply;
  reply.line = line;
  const size_t msg = line.find(" msg=");
  if (!absl::StartsWith(line, "code=") || msg == std::string::npos) return reply;
  reply.message = line.substr(msg + 5);
  std::vector<std::string> words = absl::StrSplit(line.substr(0, msg), ' ');
  for (const std::string& word : words) {
    const size_t eq = word.find('=');
    if (eq != std::string::npos) reply.fields[word.substr(0, eq)] = word.substr(eq + 1);
  }
  if (!absl::SimpleAtoi(reply["code"], &reply.code)) reply.code = -1;
  return reply;
}

// uid 65534 with group 0 and `groups` (comma-separated gids, or "none"): tenancy_peer.cc.
class OtherUser {
 public:
  static absl::StatusOr<OtherUser> Start(const std::string& socket, const std::string& groups) {
    auto process = PeerProcess::StartProgram(
        TENSORBROKER_TENANCY_PEER_PATH, socket,
        {"--uid", std::to_string(kNobody), "--gid", "0", "--groups", groups});
    if (!process.ok()) return process.status();
    auto ready = process->ReadLine();
    if (!ready.ok()) return ready.status();
    if (*ready != "ready") return absl::InternalError("the peer said: " + *ready);
    return OtherUser(*std::move(process));
  }

  // Sends one command and returns its answer.
  Reply Call(const std::string& command) {
    if (absl::Status s = Send(command); !s.ok()) return ParseReply(s.ToString());
    return Receive();
  }
  // For overlapping commands: Send now, Receive later (answers come in order).
  absl::Status Send(const std::string& command) { return process_.WriteLine(command); }
  Reply Receive() {
    auto line = process_.ReadLine();
    return ParseReply(line.ok() ? *line : line.status().ToString());
  }

 private:
  explicit OtherUser(PeerProcess process) : process_(std::move(process)) {}
  PeerProcess process_;
};

#define EXPECT_REPLY(reply, code_, message_)                              \
  do {                                                                    \
    const Reply& tb_reply_ = (reply);                                     \
    EXPECT_EQ(tb_reply_.code, static_cast<int>(code_)) << tb_reply_.line; \
    EXPECT_EQ(tb_reply_.message, (message_)) << tb_reply_.line;           \
  } while (0)

v1::DataType Uint8Proto() {
  v1::DataType dtype;
  dtype.set_code(kDLUInt);
  dtype.set_bits(8);
  dtype.set_lanes(1);
  return dtype;
}

#define EXPECT_GRPC(status_expr, code_, message_)                          \
  do {                                                                     \
    const grpc::Status tb_grpc_ = (status_expr);                           \
    EXPECT_EQ(tb_grpc_.error_code(), (code_)) << tb_grpc_.error_message(); \
    EXPECT_EQ(tb_grpc_.error_message(), (message_));                       \
  } while (0)

std::optional<gid_t> GidOf(const char* group_name) {
  const group* found = ::getgrnam(group_name);
  if (found == nullptr) return std::nullopt;
  return found->gr_gid;
}

class TenancyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "acting as uid 65534 needs root";
    nobody_ = DescribeUid(kNobody);
    root_name_ = DescribeUid(0);
  }

  void TearDown() override {
    root_.reset();
    if (daemon_ == nullptr) return;
    auto status = daemon_->Stop();
    ASSERT_TRUE(status.ok()) << status.status();
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
        << "tensorbrokerd " << DescribeWaitStatus(*status) << "\n"
        << daemon_->Log();
  }

  // Starts the daemon (call with ASSERT_NO_FATAL_FAILURE) and connects root's client.
  void StartDaemon(const std::vector<std::string>& args, const std::string& config = "") {
    auto daemon = LoggedDaemon::Start(args, config);
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = *std::move(daemon);
    auto client = Client::Connect(socket());
    ASSERT_TRUE(client.ok()) << client.status();
    root_ = *std::move(client);
  }

  const std::string& socket() const { return daemon_->socket(); }
  Client& root() { return *root_; }

  // uid 65534 with `groups` (gids, comma-separated, or "none").
  absl::StatusOr<OtherUser> Nobody(const std::string& groups = "none") {
    return OtherUser::Start(socket(), groups);
  }

  // Publishes `bytes` (uint8) under `name` as root.
  absl::StatusOr<TensorInfo> PutBytes(const std::string& name, std::vector<uint8_t> bytes,
                                      PutOptions options = {}) {
    std::vector<int64_t> shape = {static_cast<int64_t>(bytes.size())};
    DLTensor t = HostTensor(bytes.data(), shape, dtypes::kUInt8);
    return root().Put(name, t, options);
  }
  absl::StatusOr<TensorInfo> PutFilled(const std::string& name, size_t size, uint8_t fill,
                                       std::vector<std::string> readers = {}) {
    PutOptions options;
    options.readers = std::move(readers);
    return PutBytes(name, std::vector<uint8_t>(size, fill), options);
  }
  // Root's copy of `name`'s bytes (empty, with a failure, if Get failed).
  std::vector<uint8_t> RootBytes(const std::string& name) {
    auto got = root().Get(name);
    EXPECT_TRUE(got.ok()) << name << ": " << got.status();
    if (!got.ok()) return {};
    TensorPtr tensor(*got);
    return BytesOf(tensor->dl_tensor);
  }

  // Whether the daemon's log has a line containing `text`: read until it shows up (the line is
  // written before the call is answered; the bound only guards against a missing line).
  ::testing::AssertionResult LogHas(const std::string& text) {
    const absl::Status logged = daemon_->WaitForLogLine(text, absl::Seconds(60));  // a hang guard
    if (logged.ok()) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << logged;
  }

  std::unique_ptr<LoggedDaemon> daemon_;
  std::unique_ptr<Client> root_;
  std::string nobody_;     // "uid 65534 (nobody)"
  std::string root_name_;  // "uid 0 (root)"
};

std::string Owned(const std::string& name, const std::string& owner, const std::string& verb) {
  return absl::StrCat("name '", name, "' belongs to ", owner,
                      "; only its owner or an administrator may ", verb, " it");
}

std::string NotPublished(const std::string& name) {
  return absl::StrCat("name '", name, "' is not published");
}

// ---------------------------------------------------------------------------------------------
// 1. Owners.

TEST_F(TenancyTest, AnotherUidCannotDeleteOrReplaceRootsTensor) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({}));
  ASSERT_OK_AND_ASSIGN(TensorInfo published, PutFilled("owned/x", 1000, 0x11));
  EXPECT_EQ(published.owner_uid, 0u);
  ASSERT_OK_AND_ASSIGN(OtherUser nobody, Nobody());
  ASSERT_EQ(nobody.Call("whoami")["uid"], "65534");

  EXPECT_REPLY(nobody.Call("delete owned/x"), grpc::StatusCode::PERMISSION_DENIED,
               Owned("owned/x", root_name_, "delete"));
  EXPECT_REPLY(nobody.Call("put owned/x 1000 34 replace"), grpc::StatusCode::PERMISSION_DENIED,
               Owned("owned/x", root_name_, "replace"));
  EXPECT_REPLY(nobody.Call("create owned/x 1000 replace"), grpc::StatusCode::PERMISSION_DENIED,
               Owned("owned/x", root_name_, "replace"));
  EXPECT_REPLY(nobody.Call("put owned/x 1000 34"), grpc::StatusCode::ALREADY_EXISTS,
               "name 'owned/x' is already published (set replace to overwrite)");
  // It may still read it (default readers: anyone), and finds root's bytes.
  const Reply read = nobody.Call("read owned/x");
  EXPECT_EQ(read.code, 0) << read.line;
  EXPECT_EQ(read["bytes"], "1000") << read.line;
  EXPECT_EQ(read["fill"], "17") << read.line;

  // Root's bytes and version are untouched, nothing was logged as deleted or replaced, and
  // the daemon serves on.
  EXPECT_EQ(RootBytes("owned/x"), std::vector<uint8_t>(1000, 0x11));
  ASSERT_OK_AND_ASSIGN(TensorInfo after, root().Stat("owned/x"));
  EXPECT_EQ(after.version, published.version);
  EXPECT_EQ(after.owner_uid, 0u);
  const std::string log = daemon_->Log();
  EXPECT_FALSE(absl::StrContains(log, "' deleted (")) << log;
  EXPECT_FALSE(absl::StrContains(log, "' replaced (")) << log;
  EXPECT_OK(root().Ping());
}

TEST_F(TenancyTest, OwnersAndAdministratorsReplaceAndDeleteAndTheLogSaysWho) {
  const std::optional<gid_t> staff = GidOf("staff");
  if (!staff.has_value()) GTEST_SKIP() << "no group 'staff' on this host";
  ASSERT_NO_FATAL_FAILURE(StartDaemon({}, "admin-group = staff\n"));
  ASSERT_OK_AND_ASSIGN(OtherUser nobody, Nobody());
  // uid 65534 too, but in admin-group.
  ASSERT_OK_AND_ASSIGN(OtherUser admin, Nobody(std::to_string(*staff)));

  // The owner replaces and deletes its own name.
  Reply first = nobody.Call("put mine/x 100 1");
  ASSERT_EQ(first.code, 0) << first.line;
  EXPECT_EQ(first["owner"], "65534");
  Reply second = nobody.Call("put mine/x 100 2 replace");
  ASSERT_EQ(second.code, 0) << second.line;
  // An owner's own replacement is logged at debug only: a stream replaces its name at every
  // frame, and the info log is for acts on someone else's name.
  EXPECT_FALSE(LogHas(absl::StrCat("'mine/x' replaced (version ", first["version"])))
      << daemon_->Log();
  // Root, an administrator, replaces it: the name keeps its owner.
  PutOptions replace;
  replace.replace = true;
  ASSERT_OK_AND_ASSIGN(TensorInfo by_root,
                       PutBytes("mine/x", std::vector<uint8_t>(100, 3), replace));
  EXPECT_EQ(by_root.owner_uid, kNobody);
  EXPECT_TRUE(LogHas(absl::StrCat("'mine/x' replaced (version ", second["version"], " -> ",
                                  by_root.version, ", owner ", nobody_, ") by ", root_name_)))
      << daemon_->Log();
  EXPECT_REPLY(nobody.Call("delete mine/x"), grpc::StatusCode::OK, "");
  EXPECT_TRUE(LogHas(absl::StrCat("'mine/x' deleted (version ", by_root.version, ", owner ",
                                  nobody_, ") by ", nobody_)))
      << daemon_->Log();

  // A member of admin-group who is not root replaces and deletes root's name.
  ASSERT_OK_AND_ASSIGN(TensorInfo roots, PutFilled("roots/x", 100, 0x11));
  EXPECT_REPLY(nobody.Call("put roots/x 100 34 replace"), grpc::StatusCode::PERMISSION_DENIED,
               Owned("roots/x", root_name_, "replace"));
  const Reply replaced = admin.Call("put roots/x 100 34 replace");
  ASSERT_EQ(replaced.code, 0) << replaced.line;
  EXPECT_EQ(replaced["owner"], "0");
  EXPECT_TRUE(LogHas(absl::StrCat("'roots/x' replaced (version ", roots.version, " -> ",
                                  replaced["version"], ", owner ", root_name_, ") by ", nobody_)))
      << daemon_->Log();
  EXPECT_EQ(RootBytes("roots/x"), std::vector<uint8_t>(100, 34));
  EXPECT_REPLY(nobody.Call("delete roots/x"), grpc::StatusCode::PERMISSION_DENIED,
               Owned("roots/x", root_name_, "delete"));
  EXPECT_REPLY(admin.Call("delete roots/x"), grpc::StatusCode::OK, "");
  EXPECT_TRUE(LogHas(absl::StrCat("'roots/x' deleted (version ", replaced["version"], ", owner ",
                                  root_name_, ") by ", nobody_)))
      << daemon_->Log();
  EXPECT_CODE(root().Stat("roots/x"), absl::StatusCode::kNotFound);

  // The administrator also sees every user's usage; the plain user only its own. (Root's
  // client sends its queued releases before a unary call such as Ping.)
  ASSERT_OK(root().Ping());
  ASSERT_OK(PutFilled("roots/y", 10, 1));
  const Reply its = nobody.Call("put mine/y 20 1");
  ASSERT_EQ(its.code, 0) << its.line;
  EXPECT_EQ(admin.Call("stats")["users"], "0:10:1:0:0;65534:20:1:0:0");
  EXPECT_EQ(nobody.Call("stats")["users"], "65534:20:1:0:0");
  // Root deletes another user's name.
  ASSERT_OK(root().Delete("mine/y"));
  EXPECT_TRUE(LogHas(absl::StrCat("'mine/y' deleted (version ", its["version"], ", owner ", nobody_,
                                  ") by ", root_name_)))
      << daemon_->Log();
  EXPECT_OK(root().Ping());
}

// A version an administrator publishes over another user's name stays the name owner's to
// read and delete, whatever readers the administrator gave it.
TEST_F(TenancyTest, NameOwnerKeepsAVersionAnAdministratorPublished) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({}));
  ASSERT_OK_AND_ASSIGN(OtherUser nobody, Nobody());
  ASSERT_EQ(nobody.Call("put theirs/x 64 1").code, 0);
  PutOptions options;
  options.replace = true;
  options.readers = {"uid:0"};
  ASSERT_OK_AND_ASSIGN(TensorInfo by_root,
                       PutBytes("theirs/x", std::vector<uint8_t>(64, 9), options));
  EXPECT_EQ(by_root.owner_uid, kNobody);
  EXPECT_EQ(by_root.readers, (std::vector<std::string>{"uid:0", "uid:65534"}));
  const Reply stat = nobody.Call("stat theirs/x");
  EXPECT_EQ(stat.code, 0) << stat.line;
  EXPECT_EQ(stat["owner"], "65534") << stat.line;
  const Reply read = nobody.Call("read theirs/x");
  EXPECT_EQ(read.code, 0) << read.line;
  EXPECT_EQ(read["fill"], "9") << read.line;
  EXPECT_REPLY(nobody.Call("delete theirs/x"), grpc::StatusCode::OK, "");
  EXPECT_CODE(root().Stat("theirs/x"), absl::StatusCode::kNotFound);
}

// ---------------------------------------------------------------------------------------------
// 2. Readers.

TEST_F(TenancyTest, ATensorDoesNotExistForThoseWhoMayNotReadIt) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({}));
  ASSERT_OK(PutFilled("hidden/x", 100, 7, {"uid:0"}));
  ASSERT_OK(PutFilled("open/y", 100, 8));
  ASSERT_OK_AND_ASSIGN(OtherUser nobody, Nobody());

  EXPECT_REPLY(nobody.Call("get hidden/x 0"), grpc::StatusCode::NOT_FOUND,
               NotPublished("hidden/x"));
  EXPECT_REPLY(nobody.Call("stat hidden/x"), grpc::StatusCode::NOT_FOUND, NotPublished("hidden/x"));
  EXPECT_REPLY(nobody.Call("read hidden/x"), grpc::StatusCode::NOT_FOUND, NotPublished("hidden/x"));
  EXPECT_REPLY(nobody.Call("delete hidden/x"), grpc::StatusCode::NOT_FOUND,
               NotPublished("hidden/x"));
  // Root's pending tensor does not exist for it either, whatever the call.
  CreateOptions roots_only;
  roots_only.readers = {"uid:0"};
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * pending_raw,
                       root().Create("hidden/pending", {16}, dtypes::kUInt8, roots_only));
  TensorPtr pending(pending_raw);
  const std::string no_pending = "name 'hidden/pending' has no unsealed tensor (Create it first)";
  EXPECT_REPLY(nobody.Call("stat hidden/pending"), grpc::StatusCode::NOT_FOUND,
               NotPublished("hidden/pending"));
  EXPECT_REPLY(nobody.Call("seal hidden/pending"), grpc::StatusCode::NOT_FOUND, no_pending);
  EXPECT_REPLY(nobody.Call("abort hidden/pending"), grpc::StatusCode::NOT_FOUND, no_pending);
  EXPECT_REPLY(nobody.Call("seal never/created"), grpc::StatusCode::NOT_FOUND,
               "name 'never/created' has no unsealed tensor (Create it first)");
  ASSERT_OK(root().Abort("hidden/pending"));  // still root's own: untouched by those calls
  pending.reset();
  // One it may read is there for it, and not its own to seal.
  ASSERT_OK_AND_ASSIGN(pending_raw, root().Create("open/pending", {16}, dtypes::kUInt8));
  pending.reset(pending_raw);
  EXPECT_REPLY(nobody.Call("seal open/pending"), grpc::StatusCode::PERMISSION_DENIED,
               "name 'open/pending' is being created by another session");
  ASSERT_OK(root().Abort("open/pending"));
  pending.reset();
  EXPECT_EQ(nobody.Call("list - 0")["names"], "open/y");
  EXPECT_EQ(nobody.Call("list hidden/ 0")["names"], "");
  const Reply stats = nobody.Call("stats");
  EXPECT_EQ(stats["tensors"], "1") << stats.line;
  EXPECT_EQ(stats["users"], "65534:0:0:0:0") << stats.line;
  // The open one it sees in full.
  const Reply read = nobody.Call("read open/y");
  EXPECT_EQ(read["bytes"], "100") << read.line;
  EXPECT_EQ(read["fill"], "8") << read.line;

  // Root, an administrator, sees both, and every user.
  ASSERT_OK_AND_ASSIGN(BrokerStats root_stats, root().Stats());
  EXPECT_EQ(root_stats.tensors, 2u);
  ASSERT_EQ(root_stats.users.size(), 1u);
  EXPECT_EQ(root_stats.users[0].uid, 0u);
  EXPECT_EQ(root_stats.users[0].tensors, 2u);
  ASSERT_OK_AND_ASSIGN(std::vector<TensorInfo> listed, root().List());
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[0].name, "hidden/x");
  EXPECT_EQ(listed[0].readers, std::vector<std::string>{"uid:0"});
  EXPECT_EQ(RootBytes("hidden/x"), std::vector<uint8_t>(100, 7));
}

TEST_F(TenancyTest, ReadersByUidGidAndGroupNameSeeIt) {
  const std::optional<gid_t> users = GidOf("users");
  if (!users.has_value()) GTEST_SKIP() << "no group 'users' on this host";
  ASSERT_NO_FATAL_FAILURE(StartDaemon({}));
  ASSERT_OK(PutFilled("r/uid", 10, 1, {"uid:65534"}));
  ASSERT_OK(PutFilled("r/gid", 10, 2, {absl::StrCat("gid:", *users)}));
  ASSERT_OK(PutFilled("r/group", 10, 3, {"group:users"}));
  ASSERT_OK(PutFilled("r/user", 10, 4, {"user:nobody"}));
  ASSERT_OK(PutFilled("r/anyone", 10, 5, {"*"}));
  ASSERT_OK(PutFilled("r/root", 10, 6, {"uid:0"}));
  ASSERT_OK_AND_ASSIGN(TensorInfo by_group, root().Stat("r/group"));
  EXPECT_EQ(by_group.readers, std::vector<std::string>{absl::StrCat("gid:", *users)});

  ASSERT_OK_AND_ASSIGN(OtherUser plain, Nobody());
  ASSERT_OK_AND_ASSIGN(OtherUser member, Nobody(std::to_string(*users)));
  EXPECT_EQ(plain.Call("list r/ 0")["names"], "r/anyone,r/uid,r/user");
  EXPECT_EQ(member.Call("list r/ 0")["names"], "r/anyone,r/gid,r/group,r/uid,r/user");
  for (const char* name : {"r/gid", "r/group"}) {
    EXPECT_REPLY(plain.Call(absl::StrCat("get ", name, " 0")), grpc::StatusCode::NOT_FOUND,
                 NotPublished(name));
    const Reply got = member.Call(absl::StrCat("get ", name, " 0"));
    EXPECT_EQ(got.code, 0) << got.line;
    EXPECT_EQ(member.Call(absl::StrCat("release ", got["lease"])).code, 0);
    EXPECT_EQ(member.Call(absl::StrCat("stat ", name)).code, 0);
  }
  const Reply read = plain.Call("read r/uid");
  EXPECT_EQ(read.code, 0) << read.line;
  EXPECT_EQ(read["fill"], "1") << read.line;
  EXPECT_EQ(plain.Call("stat r/anyone")["readers"], "*");
  EXPECT_REPLY(member.Call("read r/root"), grpc::StatusCode::NOT_FOUND, NotPublished("r/root"));
}

// A Get that waits does not wake for a version its caller may not read; it runs out. A reader
// waiting for the same name gets it. (Whether the peers' Gets reach the daemon before the
// publication or after, the answers are the same.)
TEST_F(TenancyTest, AWaitingGetWakesOnlyForAVersionItsCallerMayRead) {
  const std::optional<gid_t> users = GidOf("users");
  if (!users.has_value()) GTEST_SKIP() << "no group 'users' on this host";
  ASSERT_NO_FATAL_FAILURE(StartDaemon({}));
  ASSERT_OK_AND_ASSIGN(OtherUser plain, Nobody());
  ASSERT_OK_AND_ASSIGN(OtherUser member, Nobody(std::to_string(*users)));
  ASSERT_OK(plain.Send("get late/x 3000"));
  ASSERT_OK(member.Send("get late/x 20000"));
  ASSERT_OK(PutFilled("late/x", 10, 1, {absl::StrCat("gid:", *users)}));
  const Reply woke = member.Receive();
  EXPECT_EQ(woke.code, 0) << woke.line;
  EXPECT_REPLY(plain.Receive(), grpc::StatusCode::DEADLINE_EXCEEDED,
               "name 'late/x' was not published before the wait ran out");
  // A later version for anyone wakes the plain one.
  ASSERT_OK(plain.Send("get late/x 20000"));
  PutOptions options;
  options.replace = true;
  ASSERT_OK(PutBytes("late/x", {2}, options));
  const Reply now = plain.Receive();
  EXPECT_EQ(now.code, 0) << now.line;
  EXPECT_OK(root().Ping());
}

// Cancel{request_id} on the local channel reaches only the Gets of the connection it comes on:
// another uid sending it for every likely request id leaves root's waiting Get waiting, and
// that Get then gets its tensor, byte for byte.
TEST_F(TenancyTest, AnotherUidCannotCancelAWaitingGet) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({}));
  absl::StatusOr<DLManagedTensorVersioned*> got = absl::UnknownError("not run");
  std::thread waiter([&] { got = root().Get("cancel/victim", std::chrono::seconds(60)); });
  ASSERT_TRUE(PollUntil([&] { return root().Stats().ok() && root().Stats()->waiting_gets == 1; },
                        std::chrono::seconds(10)));
  ASSERT_OK_AND_ASSIGN(OtherUser attacker, Nobody());
  const Reply opened = attacker.Call("local_open");
  ASSERT_EQ(opened.code, 0) << opened.line;
  const Reply cancelled = attacker.Call("local_cancel 1000");
  EXPECT_EQ(cancelled.code, 0) << cancelled.line;  // its own barrier; the cancels found nothing
  ASSERT_OK_AND_ASSIGN(BrokerStats stats, root().Stats());
  EXPECT_EQ(stats.waiting_gets, 1u) << "root's Get still waits";
  ASSERT_OK(PutBytes("cancel/victim", {7, 8, 9}, {}));
  waiter.join();
  ASSERT_OK(got);
  TensorPtr tensor(*got);
  const uint8_t* bytes = static_cast<const uint8_t*>(tensor->dl_tensor.data);
  EXPECT_EQ(std::vector<uint8_t>(bytes, bytes + 3), (std::vector<uint8_t>{7, 8, 9}));
  EXPECT_OK(root().Ping());
}

// A watch shows only the events of versions its uid may read: uid 65534 watching everything
// learns nothing of root's private tensor (not its publication, replacement or deletion), while
// root's own watch sees all of them.
TEST_F(TenancyTest, AWatcherOfAnotherUidSeesOnlyTheEventsOfWhatItMayRead) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({}));
  ASSERT_OK_AND_ASSIGN(TensorInfo start, PutFilled("w/start", 10, 1, {"*"}));
  ASSERT_OK_AND_ASSIGN(TensorInfo secret, PutFilled("w/secret", 10, 0x5e, {"uid:0"}));
  ASSERT_OK_AND_ASSIGN(TensorInfo open, PutFilled("w/open", 10, 2, {"*"}));
  PutOptions replace;
  replace.replace = true;
  replace.readers = {"uid:0"};
  ASSERT_OK_AND_ASSIGN(TensorInfo secret2,
                       PutBytes("w/secret", std::vector<uint8_t>(10, 0x5f), replace));
  ASSERT_OK(root().Delete("w/open"));
  ASSERT_OK_AND_ASSIGN(OtherUser nobody, Nobody());
  // Everything after "w/start" that it may see: two events, then nothing more in 1 s.
  const Reply watched = nobody.Call(absl::StrCat("watch - ", start.version, " 3 1000"));
  EXPECT_EQ(watched.code, static_cast<int>(grpc::StatusCode::DEADLINE_EXCEEDED)) << watched.line;
  EXPECT_EQ(watched["events"],
            absl::StrCat("PUBLISHED:w/open:", open.version, ",DELETED:w/open:", open.version));
  // Root sees its own secret's events too, in order.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Watcher> all, [&] {
    WatchOptions options;
    options.after_version = start.version;
    return root().Watch("w/", options);
  }());
  std::vector<std::string> seen;
  for (int i = 0; i < 4; ++i) {
    ASSERT_OK_AND_ASSIGN(std::optional<WatchEvent> event, all->Next(std::chrono::seconds(10)));
    ASSERT_TRUE(event.has_value());
    seen.push_back(absl::StrCat(WatchEventKindName(event->kind), ":", event->name));
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"published:w/secret", "published:w/open",
                                            "replaced:w/secret", "deleted:w/open"}));
  EXPECT_GT(secret2.version, secret.version);
  // The secret's bytes are intact, and the daemon serves.
  EXPECT_EQ(RootBytes("w/secret"), std::vector<uint8_t>(10, 0x5f));
  EXPECT_EQ(nobody.Call("stat w/start").code, 0);
}

TEST_F(TenancyTest, DefaultReadersApplyToTensorsThatNameNone) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--default-readers", "uid:0"}));
  ASSERT_OK_AND_ASSIGN(TensorInfo unnamed, PutFilled("d/unnamed", 10, 1));
  EXPECT_EQ(unnamed.readers, std::vector<std::string>{"uid:0"});
  ASSERT_OK(PutFilled("d/anyone", 10, 2, {"*"}));
  ASSERT_OK_AND_ASSIGN(OtherUser nobody, Nobody());
  EXPECT_REPLY(nobody.Call("stat d/unnamed"), grpc::StatusCode::NOT_FOUND,
               NotPublished("d/unnamed"));
  EXPECT_EQ(nobody.Call("list d/ 0")["names"], "d/anyone");
  // Its own tensors follow the same default, and it still sees them (their owner).
  ASSERT_EQ(nobody.Call("put d/its 10 3").code, 0);
  EXPECT_EQ(nobody.Call("stat d/its")["readers"], "uid:0");
  EXPECT_EQ(nobody.Call("read d/its")["fill"], "3");
}

TEST_F(TenancyTest, PrefixRulesSetReadersAndPublishersUnderTheirPrefixOnly) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({}, "readers[team/] = uid:0\npublishers[team/] = uid:0\n"));
  ASSERT_OK_AND_ASSIGN(TensorInfo team, PutFilled("team/a", 10, 1));
  EXPECT_EQ(team.readers, std::vector<std::string>{"uid:0"});
  ASSERT_OK_AND_ASSIGN(TensorInfo other, PutFilled("other/a", 10, 2));
  EXPECT_EQ(other.readers, std::vector<std::string>{"*"});
  // Readers named in the request win over the rule.
  ASSERT_OK(PutFilled("team/open", 10, 3, {"*"}));

  ASSERT_OK_AND_ASSIGN(OtherUser nobody, Nobody());
  EXPECT_REPLY(nobody.Call("get team/a 0"), grpc::StatusCode::NOT_FOUND, NotPublished("team/a"));
  EXPECT_EQ(nobody.Call("list - 0")["names"], "other/a,team/open");
  const std::string refusal =
      absl::StrCat("name 'team/b': ", nobody_,
                   " may not publish under 'team/' (the daemon's publishers[team/] is uid:0)");
  EXPECT_REPLY(nobody.Call("put team/b 10 1"), grpc::StatusCode::PERMISSION_DENIED, refusal);
  EXPECT_REPLY(nobody.Call("create team/b 10"), grpc::StatusCode::PERMISSION_DENIED, refusal);
  EXPECT_EQ(nobody.Call("put other/b 10 1").code, 0);
  EXPECT_EQ(nobody.Call("put teams/b 10 1").code, 0);  // another prefix
  EXPECT_CODE(root().Stat("team/b"), absl::StatusCode::kNotFound);
  ASSERT_OK(PutFilled("team/b", 10, 1));  // root may
}

TEST_F(TenancyTest, InvalidReadersAreRefusedNamingTheEntry) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({}));
  RawSession raw(socket());
  ASSERT_FALSE(raw.id().empty());
  struct Case {
    std::vector<std::string> readers;
    std::string problem;  // after "<field>"
  };
  std::vector<std::string> many;
  for (int i = 0; i < 65; ++i) many.push_back(absl::StrCat("uid:", i));
  const std::vector<Case> cases = {
      {{"uid:0", "bogus"},
       "[1]: 'bogus' is not uid:N, gid:N, user:NAME, group:NAME, peer:NAME or *"},
      {{"user:nosuchuser"}, "[0]: no user named 'nosuchuser'"},
      {{"group:nosuchgroup"}, "[0]: no group named 'nosuchgroup'"},
      {{"uid:-1"}, "[0]: 'uid:-1' is not a valid id (a number below 4294967295)"},
      {{"gid:4294967295"}, "[0]: 'gid:4294967295' is not a valid id (a number below 4294967295)"},
      {many, ": 65 entries; at most 64"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrJoin(c.readers, ",").substr(0, 40));
    v1::CreateRequest create;
    create.set_name("bad/readers");
    *create.mutable_dtype() = Uint8Proto();
    create.add_shape(4);
    for (const std::string& r : c.readers) create.add_readers(r);
    v1::TensorGrant grant;
    EXPECT_GRPC(raw.Create(create, &grant), grpc::StatusCode::INVALID_ARGUMENT,
                absl::StrCat("readers", c.problem));

    v1::TensorInfo info;
    auto context = Deadline30s();
    auto writer = raw.stub().Put(context.get(), &info);
    v1::PutRequest header;
    header.mutable_header()->set_name("bad/readers");
    *header.mutable_header()->mutable_dtype() = Uint8Proto();
    header.mutable_header()->add_shape(4);
    for (const std::string& r : c.readers) header.mutable_header()->add_readers(r);
    writer->Write(header);
    writer->WritesDone();
    EXPECT_GRPC(writer->Finish(), grpc::StatusCode::INVALID_ARGUMENT,
                absl::StrCat("header.readers", c.problem));

    // The client library's Create goes over the local channel.
    CreateOptions options;
    options.readers = c.readers;
    auto created = root().Create("bad/readers", {4}, dtypes::kUInt8, options);
    ASSERT_FALSE(created.ok());
    EXPECT_EQ(created.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(created.status().message(), absl::StrCat("create.readers", c.problem));
  }
  EXPECT_CODE(root().Stat("bad/readers"), absl::StatusCode::kNotFound);
  ASSERT_OK_AND_ASSIGN(BrokerStats stats, root().Stats());
  EXPECT_EQ(stats.pending, 0u);
  EXPECT_EQ(stats.used_bytes, 0u);
}

// A reader's descriptor reaches its tensor's whole segment, so a segment holds only tensors of
// one owner with the same readers.
TEST_F(TenancyTest, SegmentsAreSharedOnlyByTensorsWithTheSameOwnerAndReaders) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({}));
  auto marker = [](uint8_t seed) {
    std::vector<uint8_t> bytes(32);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(seed + 7 * i);
    return bytes;
  };
  auto hex = [](const std::vector<uint8_t>& bytes) {
    return absl::BytesToHexString(
        absl::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  };
  const std::vector<uint8_t> a = marker(0x10), b = marker(0x60), c = marker(0xB0);
  PutOptions for_nobody, for_root, for_nobody_by_name;
  for_nobody.readers = {"uid:65534"};
  for_root.readers = {"uid:0"};
  for_nobody_by_name.readers = {"user:nobody"};  // the same set as seg/a's
  ASSERT_OK(PutBytes("seg/a", a, for_nobody));
  ASSERT_OK(PutBytes("seg/b", b, for_root));
  ASSERT_OK(PutBytes("seg/c", c, for_nobody_by_name));

  RawSession raw(socket());
  v1::TensorGrant grant_a, grant_b, grant_c;
  ASSERT_TRUE(raw.Get("seg/a", &grant_a).ok());
  ASSERT_TRUE(raw.Get("seg/b", &grant_b).ok());
  ASSERT_TRUE(raw.Get("seg/c", &grant_c).ok());
  EXPECT_NE(grant_a.region().segment(), grant_b.region().segment());
  EXPECT_EQ(grant_a.region().segment(), grant_c.region().segment());  // pooled, same key

  ASSERT_OK_AND_ASSIGN(OtherUser nobody, Nobody());
  ASSERT_EQ(nobody.Call("local_open").code, 0);
  const Reply got = nobody.Call(absl::StrCat("local_get seg/a ", hex(a), ",", hex(b), ",", hex(c)));
  ASSERT_EQ(got.code, 0) << got.line;
  EXPECT_EQ(got["segment"], grant_a.region().segment());
  EXPECT_EQ(got["descriptors"], "1");
  EXPECT_EQ(got["writable"], "0");
  // Its own tensors' bytes and those of the same owner and readers; never seg/b's.
  EXPECT_EQ(got["found"], "1,0,1") << got.line;
  EXPECT_REPLY(nobody.Call(absl::StrCat("local_get seg/b ", hex(b))), grpc::StatusCode::NOT_FOUND,
               NotPublished("seg/b"));
}

// ---------------------------------------------------------------------------------------------
// 3. Quotas.

TEST_F(TenancyTest, QuotasBoundEachUserAlone) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--quota-bytes", "1M", "--quota-tensors", "3"},
                                      "quota-bytes[uid:65534] = 65536\n"));
  ASSERT_OK_AND_ASSIGN(const uint64_t one_mib, ParseByteSize("1M", "test"));
  ASSERT_OK_AND_ASSIGN(OtherUser nobody, Nobody());
  ASSERT_EQ(nobody.Call("put q/a 40000 1").code, 0);
  const std::string over_bytes = absl::StrCat(
      "quota-bytes: name 'q/b' needs ", FormatByteSize(40000), "; ", nobody_, " holds ",
      FormatByteSize(40000), " in 1 tensor(s) of its quota of ", FormatByteSize(65536),
      " (release or delete tensors, or ask for a larger quota)");
  EXPECT_REPLY(nobody.Call("put q/b 40000 2"), grpc::StatusCode::RESOURCE_EXHAUSTED, over_bytes);
  EXPECT_REPLY(nobody.Call("create q/b 40000"), grpc::StatusCode::RESOURCE_EXHAUSTED, over_bytes);
  EXPECT_EQ(nobody.Call("stats")["users"], "65534:40000:1:65536:3");

  // Root's quota is the default one, and untouched by nobody's usage.
  ASSERT_OK(PutFilled("q/root", 500000, 1));
  const std::string root_over = absl::StrCat(
      "quota-bytes: name 'q/root2' needs ", FormatByteSize(600000), "; ", root_name_, " holds ",
      FormatByteSize(500000), " in 1 tensor(s) of its quota of ", FormatByteSize(one_mib),
      " (release or delete tensors, or ask for a larger quota)");
  auto refused = PutFilled("q/root2", 600000, 1);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.status().message(), root_over);
  ASSERT_OK_AND_ASSIGN(BrokerStats stats, root().Stats());
  ASSERT_EQ(stats.users.size(), 2u);
  EXPECT_EQ(stats.users[0].uid, 0u);
  EXPECT_EQ(stats.users[0].user, "root");
  EXPECT_EQ(stats.users[0].bytes, 500000u);
  EXPECT_EQ(stats.users[0].tensors, 1u);
  EXPECT_EQ(stats.users[0].quota_bytes, one_mib);
  EXPECT_EQ(stats.users[0].quota_tensors, 3u);
  EXPECT_EQ(stats.users[1].uid, kNobody);
  EXPECT_EQ(stats.users[1].user, "nobody");
  EXPECT_EQ(stats.users[1].bytes, 40000u);
  EXPECT_EQ(stats.users[1].tensors, 1u);
  EXPECT_EQ(stats.users[1].quota_bytes, 65536u);
  EXPECT_EQ(stats.users[1].quota_tensors, 3u);
  ASSERT_OK_AND_ASSIGN(ProcessOutput cli,
                       RunAs(0, 0, {TENSORBROKER_CLI_PATH, "--socket", socket(), "stats", "--json"},
                             {"PATH=/usr/bin:/bin"}));
  EXPECT_TRUE(WIFEXITED(cli.status) && WEXITSTATUS(cli.status) == 0) << cli.err;
  EXPECT_TRUE(absl::StrContains(
      cli.out, absl::StrCat("\"users\": [{\"uid\": 0, \"user\": \"root\", \"bytes\": 500000, "
                            "\"tensors\": 1, \"quota_bytes\": ",
                            one_mib,
                            ", \"quota_tensors\": 3}, {\"uid\": 65534, \"user\": \"nobody\", "
                            "\"bytes\": 40000, \"tensors\": 1, \"quota_bytes\": 65536, "
                            "\"quota_tensors\": 3}]")))
      << cli.out;

  // Deleting gives the room back; the next Put fits.
  EXPECT_REPLY(nobody.Call("delete q/a"), grpc::StatusCode::OK, "");
  EXPECT_EQ(nobody.Call("stats")["users"], "65534:0:0:65536:3");
  EXPECT_EQ(nobody.Call("put q/b 40000 2").code, 0);

  // Tensors: three at most; a lease keeps a deleted one counted until it is released.
  EXPECT_EQ(nobody.Call("put q/c 10 3").code, 0);
  EXPECT_EQ(nobody.Call("put q/d 10 4").code, 0);
  const std::string over_count = absl::StrCat(
      "quota-tensors: name 'q/e': ", nobody_, " holds ", FormatByteSize(40020),
      " in 3 tensor(s), its quota is 3 tensor(s) (release or delete tensors, or ask for a "
      "larger quota)");
  EXPECT_REPLY(nobody.Call("put q/e 10 5"), grpc::StatusCode::RESOURCE_EXHAUSTED, over_count);
  const Reply held = nobody.Call("get q/c 0");
  ASSERT_EQ(held.code, 0) << held.line;
  EXPECT_REPLY(nobody.Call("delete q/c"), grpc::StatusCode::OK, "");
  EXPECT_REPLY(nobody.Call("put q/e 10 5"), grpc::StatusCode::RESOURCE_EXHAUSTED, over_count);
  EXPECT_EQ(nobody.Call("stats")["users"], "65534:40020:3:65536:3");
  EXPECT_REPLY(nobody.Call(absl::StrCat("release ", held["lease"])), grpc::StatusCode::OK, "");
  EXPECT_EQ(nobody.Call("stats")["users"], "65534:40010:2:65536:3");
  EXPECT_EQ(nobody.Call("put q/e 10 5").code, 0);
  // Root still puts; its own tensor quota is its own.
  ASSERT_OK(PutFilled("q/root3", 10, 1));
  EXPECT_OK(root().Ping());
}

// ---------------------------------------------------------------------------------------------
// 4. Pending timeout.

TEST_F(TenancyTest, ACreateNeverSealedIsAbortedAndItsNameFreed) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--pending-timeout", "1s"}));
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw, root().Create("p/x", {100}, dtypes::kUInt8));
  TensorPtr created(raw);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> other, Client::Connect(socket()));
  // Taken until the pending timeout frees it (the 20 s bound only guards against a hang).
  absl::Status second;
  EXPECT_TRUE(PollUntil(
      [&] {
        auto attempt = other->Create("p/x", {100}, dtypes::kUInt8);
        if (attempt.ok()) (*attempt)->deleter(*attempt);
        second = StatusOf(attempt);
        return !absl::IsAlreadyExists(second);
      },
      std::chrono::seconds(20), std::chrono::milliseconds(50)));
  EXPECT_OK(second);
  auto sealed = root().Seal("p/x");
  EXPECT_EQ(sealed.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(sealed.status().message(),
            "name 'p/x' was aborted: not sealed within the daemon's pending timeout (1s)");
  EXPECT_TRUE(
      LogHas("'p/x' aborted: not sealed within the pending timeout (1s); owner " + root_name_))
      << daemon_->Log();
  EXPECT_OK(root().Ping());
}

TEST_F(TenancyTest, APutThatSendsOnlyItsHeaderIsAbortedAndItsMemoryFreed) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--pending-timeout", "1s"}));
  ASSERT_OK_AND_ASSIGN(BrokerStats baseline, root().Stats());
  RawSession raw(socket());
  v1::TensorInfo info;
  auto context = Deadline30s();  // a hang guard: the daemon must finish the call first
  auto writer = raw.stub().Put(context.get(), &info);
  v1::PutRequest header;
  header.mutable_header()->set_name("p/put");
  *header.mutable_header()->mutable_dtype() = Uint8Proto();
  header.mutable_header()->add_shape(1 << 20);
  ASSERT_TRUE(writer->Write(header));
  // Never WritesDone: the daemon's pending timeout ends the call by itself.
  EXPECT_GRPC(writer->Finish(), grpc::StatusCode::DEADLINE_EXCEEDED,
              "name 'p/put': the Put did not finish within the daemon's pending timeout; its "
              "name is free again");
  EXPECT_CODE(root().Stat("p/put"), absl::StatusCode::kNotFound);
  BrokerStats after;
  EXPECT_TRUE(PollUntil([&] {
    auto stats = root().Stats();
    if (stats.ok()) after = *stats;
    return stats.ok() && stats->used_bytes == baseline.used_bytes && stats->pending == 0;
  })) << "used_bytes "
      << after.used_bytes << " (was " << baseline.used_bytes << "), pending " << after.pending;
  EXPECT_TRUE(after.users.empty());
  EXPECT_TRUE(
      LogHas("'p/put' aborted: its Put did not finish within the pending timeout (1s); "
             "owner " +
             root_name_ + "; the name is free again"))
      << daemon_->Log();

  // The name is free for its owner: put, put --replace, rm (the CLI).
  const std::string npy = daemon_->dir() + "/x.npy";
  {
    std::string npy_header = "{'descr': '|u1', 'fortran_order': False, 'shape': (4,), }";
    npy_header.append(64 - (10 + npy_header.size() + 1) % 64, ' ');
    npy_header.push_back('\n');
    std::ofstream out(npy, std::ios::binary);
    out << "\x93NUMPY" << '\x01' << '\x00' << static_cast<char>(npy_header.size()) << '\x00'
        << npy_header << "abcd";
  }
  uint64_t last_version = 0;
  for (std::vector<std::string> args : {std::vector<std::string>{"put", "p/put", npy},
                                        std::vector<std::string>{"put", "p/put", npy, "--replace"},
                                        std::vector<std::string>{"rm", "p/put"}}) {
    if (args[0] == "rm") {
      ASSERT_OK_AND_ASSIGN(TensorInfo replaced, root().Stat("p/put"));
      last_version = replaced.version;
    }
    std::vector<std::string> argv = {TENSORBROKER_CLI_PATH, "--socket", socket()};
    argv.insert(argv.end(), args.begin(), args.end());
    ASSERT_OK_AND_ASSIGN(ProcessOutput cli, RunAs(0, 0, argv, {"PATH=/usr/bin:/bin"}));
    EXPECT_TRUE(WIFEXITED(cli.status) && WEXITSTATUS(cli.status) == 0)
        << absl::StrJoin(args, " ") << ": " << cli.err;
  }
  EXPECT_CODE(root().Stat("p/put"), absl::StatusCode::kNotFound);
  EXPECT_TRUE(LogHas(absl::StrCat("'p/put' deleted (version ", last_version, ", owner ", root_name_,
                                  ") by ", root_name_)))
      << daemon_->Log();
}

// ---------------------------------------------------------------------------------------------
// 5. Logical size.

TEST_F(TenancyTest, StridesCannotMakeATensorLargerThanTheCapacity) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--capacity", "64M"}));
  RawSession raw(socket());
  auto create = [&](const std::string& name, std::vector<int64_t> shape, uint32_t bits) {
    v1::CreateRequest request;
    request.set_name(name);
    *request.mutable_dtype() = Uint8Proto();
    request.mutable_dtype()->set_bits(bits);
    for (int64_t extent : shape) {
      request.add_shape(extent);
      request.add_strides(0);
    }
    request.set_nbytes(bits / 8);
    v1::TensorGrant grant;
    return raw.Create(request, &grant);
  };
  EXPECT_GRPC(create("huge/x", {int64_t{1} << 31, int64_t{1} << 31}, 8),
              grpc::StatusCode::INVALID_ARGUMENT,
              absl::StrCat("shape: name 'huge/x' would hold ", FormatByteSize(uint64_t{1} << 62),
                           " of elements, more than the capacity of ", FormatByteSize(64 << 20),
                           " (whatever the strides)"));
  EXPECT_GRPC(create("huge/w", {int64_t{1} << 32, int64_t{1} << 32}, 8),
              grpc::StatusCode::INVALID_ARGUMENT,
              "shape [4294967296, 4294967296] has too many elements (overflow)");
  EXPECT_GRPC(create("huge/y", {int64_t{1} << 31, int64_t{1} << 31}, 64),
              grpc::StatusCode::INVALID_ARGUMENT,
              "shape [2147483648, 2147483648] is too large in bytes");
  CreateOptions zero_strides;
  zero_strides.strides = {0, 0};
  auto local =
      root().Create("huge/z", {int64_t{1} << 31, int64_t{1} << 31}, dtypes::kUInt8, zero_strides);
  EXPECT_EQ(local.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(local.status().message(), "shape: name 'huge/z' would hold "))
      << local.status();

  // Within the capacity it is served, and Read streams exactly its logical bytes, then ends.
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * made,
                       root().Create("wide/x", {4096, 4096}, dtypes::kUInt8, zero_strides));
  TensorPtr wide(made);
  *static_cast<uint8_t*>(wide->dl_tensor.data) = 0x5A;
  ASSERT_OK(root().Seal("wide/x"));
  v1::ReadRequest request;
  request.set_name("wide/x");
  auto context = Deadline30s();
  auto reader = raw.stub().Read(context.get(), request);
  v1::ReadResponse chunk;
  uint64_t total = 0, messages = 0, other_bytes = 0;
  // Bounded: a Read that never ends fails here instead of hanging.
  while (messages < 100 && reader->Read(&chunk)) {
    ++messages;
    total += chunk.data().size();
    for (char byte : chunk.data()) other_bytes += static_cast<uint8_t>(byte) != 0x5A;
  }
  if (messages == 100) context->TryCancel();
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(total, uint64_t{4096} * 4096);
  EXPECT_GE(messages, 16u);  // chunks of at most 1 MiB
  EXPECT_LT(messages, 100u);
  EXPECT_EQ(other_bytes, 0u);
  ASSERT_OK_AND_ASSIGN(BrokerStats stats, root().Stats());
  EXPECT_EQ(stats.pending, 0u);
}

// ---------------------------------------------------------------------------------------------
// 6. Lease ids.

TEST_F(TenancyTest, AnotherSessionsLeaseLooksExactlyLikeAnUnknownOne) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({}));
  ASSERT_OK(PutFilled("l/x", 100, 1));
  RawSession holder(socket()), other(socket());
  v1::TensorGrant grant;
  ASSERT_TRUE(holder.Get("l/x", &grant).ok());
  const uint64_t lease = grant.lease_id();
  const uint64_t unknown = lease + 1000000;
  auto not_live = [](uint64_t id) {
    return absl::StrCat("lease_id ", id, " is not a live lease of this session");
  };

  // Root's other session (the same uid) over gRPC.
  EXPECT_GRPC(other.Release(lease), grpc::StatusCode::NOT_FOUND, not_live(lease));
  EXPECT_GRPC(other.Release(unknown), grpc::StatusCode::NOT_FOUND, not_live(unknown));
  EXPECT_GRPC(other.Retain(lease), grpc::StatusCode::NOT_FOUND, not_live(lease));
  EXPECT_GRPC(other.Retain(unknown), grpc::StatusCode::NOT_FOUND, not_live(unknown));

  // Another uid, over gRPC and over the local channel.
  ASSERT_OK_AND_ASSIGN(OtherUser nobody, Nobody());
  for (const uint64_t id : {lease, unknown}) {
    EXPECT_REPLY(nobody.Call(absl::StrCat("release ", id)), grpc::StatusCode::NOT_FOUND,
                 not_live(id));
    EXPECT_REPLY(nobody.Call(absl::StrCat("retain ", id)), grpc::StatusCode::NOT_FOUND,
                 not_live(id));
  }
  ASSERT_EQ(nobody.Call("local_open").code, 0);
  for (const uint64_t id : {lease, unknown}) {
    const Reply fetched = nobody.Call(absl::StrCat("local_fetch ", id));
    EXPECT_REPLY(fetched, grpc::StatusCode::NOT_FOUND, not_live(id));
    EXPECT_EQ(fetched["descriptors"], "0");
    const Reply retained = nobody.Call(absl::StrCat("local_retain ", id));
    EXPECT_REPLY(retained, grpc::StatusCode::NOT_FOUND, not_live(id));
    EXPECT_EQ(retained["descriptors"], "0");
    // Batched releases of ids that are not the connection's are ignored, unanswered.
    EXPECT_REPLY(nobody.Call(absl::StrCat("local_release ", id)), grpc::StatusCode::OK, "");
  }
  // The holder's lease lived through all of it, and is still the holder's to end.
  EXPECT_EQ(LeasesOf(root(), "l/x"), 1);
  EXPECT_TRUE(holder.Retain(lease).ok());
  EXPECT_EQ(LeasesOf(root(), "l/x"), 2);
  EXPECT_TRUE(holder.Release(lease).ok());
  EXPECT_GRPC(holder.Release(lease), grpc::StatusCode::NOT_FOUND, not_live(lease));
}

// ---------------------------------------------------------------------------------------------
// 7. List pages.

TEST_F(TenancyTest, ListPagesThroughThousandsOfNamesExactlyOnceInOrder) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({}));
  constexpr int kTensors = 2500;
  std::vector<std::string> names;
  for (int i = 0; i < kTensors; ++i) {
    names.push_back(absl::StrFormat("page/%04d", i));
    ASSERT_OK(PutFilled(names.back(), 1, static_cast<uint8_t>(i)));
  }
  RawSession raw(socket());
  auto list_all = [&](uint32_t page_size, std::vector<size_t>* sizes) {
    std::vector<std::string> listed;
    std::string token;
    for (int pages = 0; pages < 100; ++pages) {  // bounded: tokens must end
      v1::ListResponse page;
      const grpc::Status status = raw.List("page/", page_size, token, &page);
      EXPECT_TRUE(status.ok()) << status.error_message();
      if (!status.ok()) break;
      sizes->push_back(static_cast<size_t>(page.tensors_size()));
      for (const v1::TensorInfo& info : page.tensors()) listed.push_back(info.name());
      if (!page.next_page_token().empty()) {
        EXPECT_EQ(page.next_page_token(), listed.back());
      }
      token = page.next_page_token();
      if (token.empty()) break;
    }
    return listed;
  };
  std::vector<size_t> sizes;
  EXPECT_EQ(list_all(1000, &sizes), names);
  EXPECT_EQ(sizes, (std::vector<size_t>{1000, 1000, 500}));
  sizes.clear();
  EXPECT_EQ(list_all(0, &sizes), names);  // 0: 500 a page
  EXPECT_EQ(sizes, (std::vector<size_t>{500, 500, 500, 500, 500}));
  sizes.clear();
  EXPECT_EQ(list_all(5000, &sizes), names);  // read as 1000
  EXPECT_EQ(sizes, (std::vector<size_t>{1000, 1000, 500}));
  ASSERT_OK_AND_ASSIGN(std::vector<TensorInfo> all, root().List("page/"));
  ASSERT_EQ(all.size(), names.size());
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i].name, names[i]);

  // Names another user may not see are skipped, and its pages still cover the rest.
  for (int i = 0; i < kTensors; i += 250) {
    ASSERT_OK(PutFilled(absl::StrFormat("page/%04d-hidden", i), 1, 0, {"uid:0"}));
  }
  ASSERT_OK_AND_ASSIGN(OtherUser nobody, Nobody());
  const Reply listed = nobody.Call("list page/ 1000");
  EXPECT_EQ(listed["names"], absl::StrJoin(names, ","));
  EXPECT_EQ(listed["pages"], "3");
  ASSERT_OK_AND_ASSIGN(all, root().List("page/"));
  EXPECT_EQ(all.size(), names.size() + 10);
}

// ---------------------------------------------------------------------------------------------
// 8. Reads without a round trip: directories and lease tables.

// A uid's directory holds the names it may read and nothing of the others, not even the name of
// one it could read once; the kernel keeps it read-only for the uid.
TEST_F(TenancyTest, ADirectoryShowsOnlyWhatItsUidMayReadAndCannotBeWritten) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({}));
  auto hex = [](const std::string& text) { return absl::BytesToHexString(text); };
  ASSERT_OK(PutFilled("dir/secret-of-root", 64, 1, {"uid:0"}));
  ASSERT_OK(PutFilled("dir/shared-with-nobody", 64, 2, {"uid:65534"}));
  const std::string markers =
      absl::StrCat(hex("dir/secret-of-root"), ",", hex("dir/shared-with-nobody"), ",",
                   hex("dir/later-for-nobody"));
  ASSERT_OK_AND_ASSIGN(OtherUser nobody, Nobody());
  ASSERT_EQ(nobody.Call("local_open").code, 0);
  Reply directory = nobody.Call("local_directory " + markers);
  ASSERT_EQ(directory.code, 0) << directory.line;
  EXPECT_EQ(directory["descriptors"], "2");
  EXPECT_EQ(directory["found"], "0,1,0") << directory.line;
  EXPECT_EQ(directory["directory_writable"], "0") << "mmap(PROT_WRITE) of the directory worked";

  // Published later: the directory follows (before the Put is answered).
  ASSERT_OK(PutFilled("dir/later-for-nobody", 64, 3, {"uid:65534"}));
  // No longer readable by uid 65534 (root replaces it for itself alone): the record goes.
  PutOptions mine;
  mine.replace = true;
  mine.readers = {"uid:0"};
  ASSERT_OK(PutBytes("dir/shared-with-nobody", std::vector<uint8_t>(64, 4), mine));
  directory = nobody.Call("local_directory " + markers);
  ASSERT_EQ(directory.code, 0) << directory.line;
  EXPECT_EQ(directory["found"], "0,0,1") << directory.line;
  EXPECT_EQ(RootBytes("dir/secret-of-root"), std::vector<uint8_t>(64, 1));
  EXPECT_EQ(nobody.Call("stat dir/secret-of-root").code, grpc::StatusCode::NOT_FOUND);
}

// A hostile process writes into its lease table the pin token of a version it may read (from
// its directory) and then every small number there is, a window around every object id the
// daemon hands out, future ones too: what it may not read is freed all the same; what it may
// read stays only while its table lives, and only the version whose token it saw: the versions
// published later, whatever numbers it wrote, are freed as they are replaced (issue 44).
TEST_F(TenancyTest, AHostileLeaseTablePinsOnlyWhatItsUidMayReadAndSaw) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({}));
  ASSERT_OK(PutFilled("pin/private", 4096, 1, {"uid:0"}));
  ASSERT_OK(PutFilled("pin/public", 4096, 2, {"*"}));
  ASSERT_OK_AND_ASSIGN(OtherUser started, Nobody());
  std::optional<OtherUser> nobody(std::move(started));
  ASSERT_EQ(nobody->Call("local_open").code, 0);
  ASSERT_EQ(nobody->Call("local_directory 00").code, 0);
  // pin/private is not in its directory (its token: 0); then more numbers than slots.
  std::vector<std::string> values = {"@pin/public", "@pin/private"};
  for (int id = 1; id <= 5000; ++id) values.push_back(std::to_string(id));
  Reply pinned = nobody->Call("local_pin " + absl::StrJoin(values, ","));
  EXPECT_EQ(pinned["pinned"], "1024") << pinned.line;

  ASSERT_OK(root().Delete("pin/private"));
  ASSERT_OK_AND_ASSIGN(BrokerStats stats, root().Stats());
  EXPECT_EQ(stats.used_bytes, 4096u) << "the private tensor was freed; the public one is held";
  ASSERT_OK(root().Delete("pin/public"));
  ASSERT_OK_AND_ASSIGN(stats, root().Stats());
  EXPECT_EQ(stats.used_bytes, 4096u) << "a slot of a reader keeps it";
  EXPECT_EQ(stats.leases, 1u) << "the one slot naming a version uid 65534 may read";
  // Versions published after the pins, readable by uid 65534: none is held by the numbers.
  for (int round = 0; round < 20; ++round) {
    PutOptions again;
    again.replace = true;
    ASSERT_OK(PutBytes("pin/future", std::vector<uint8_t>(4096, 3), again));
  }
  ASSERT_OK_AND_ASSIGN(stats, root().Stats());
  EXPECT_EQ(stats.used_bytes, 2u * 4096u) << "pin/public (held) and pin/future's current version";
  EXPECT_EQ(stats.leases, 1u);

  // Its session ends (the process is killed): nothing it wrote pins anything any more.
  nobody.reset();
  EXPECT_TRUE(PollUntil(
      [&] {
        auto now = root().Stats();
        return now.ok() && now->used_bytes == 4096 && now->leases == 0;
      },
      std::chrono::seconds(1)));
  ASSERT_OK(PutFilled("pin/after", 64, 5));  // the daemon serves on
  EXPECT_EQ(RootBytes("pin/after"), std::vector<uint8_t>(64, 5));
}

}  // namespace
}  // namespace tensorbroker::testing
