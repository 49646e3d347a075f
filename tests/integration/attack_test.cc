// Security, proven by attacks that fail: a process of another uid (uid 65534 with the socket's
// group, so it may connect: tensorbroker_attack_peer) tries every unprivileged way into root's
// sealed tensor and root's session. Each try must fail with the errno (or gRPC code) the kernel
// (or the daemon) is expected to answer; then it writes through the whole writable mapping of
// its own pending tensor, past the tensor's end. Root's bytes must be unchanged, and the daemon
// must serve on.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/integration/raw_session.h"
#include "tests/integration/test_util.h"

namespace tensorbroker::testing {
namespace {

// Runs the attack peer to its end; its lines as {first word: rest}.
std::map<std::string, std::string> RunAttack(const std::vector<std::string>& args,
                                             std::string* transcript, int* status) {
  std::vector<std::string> argv = {TENSORBROKER_ATTACK_PEER_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string command;
  for (const std::string& a : argv) absl::StrAppend(&command, "'", a, "' ");
  FILE* out = ::popen(command.c_str(), "r");
  std::map<std::string, std::string> said;
  if (out == nullptr) return said;
  char line[4096];
  while (std::fgets(line, sizeof(line), out) != nullptr) {
    std::string text(line);
    if (!text.empty() && text.back() == '\n') text.pop_back();
    absl::StrAppend(transcript, text, "\n");
    const size_t space = text.find(' ');
    said[text.substr(0, space)] = space == std::string::npos ? "" : text.substr(space + 1);
  }
  *status = ::pclose(out);
  return said;
}

using AttackTest = BrokerTest;

TEST_F(AttackTest, AnotherUidCannotReachRootsTensorsOrSession) {
  if (::geteuid() != 0) GTEST_SKIP() << "switching to uid 65534 needs root";
  // Root's sealed tensor, in a pooled segment, and a session id that leaked.
  std::vector<float> values(1000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.25f;
  ASSERT_OK(PutFloats(client(), "victim/a", values));
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw, client().Get("victim/a"));
  TensorPtr mine(raw);
  // The daemon's socket directory must be searchable for the other uid (the socket is 0660).
  const std::string dir = std::filesystem::path(socket()).parent_path().string();
  ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
  RawSession session(socket());  // its id is what the attacker is given, as if leaked
  ASSERT_FALSE(session.id().empty());
  ASSERT_OK_AND_ASSIGN(BrokerStats before, client().Stats());

  std::string transcript;
  int status = -1;
  // The daemon's segments' prefix (a hash of its socket's path): the attacker counts the files
  // of this daemon in /dev/shm, not whatever other processes put there.
  std::string prefix;
  for (const std::string& segment : SegmentFilesUsedBy(daemon_->pid())) {
    if (prefix.empty()) prefix = DaemonPrefixOf(segment);
  }
  ASSERT_FALSE(prefix.empty()) << "no segment of the daemon seen in /proc";
  auto said =
      RunAttack({"--socket", socket(), "--victim", "victim/a", "--victim-session", session.id(),
                 "--daemon-pid", std::to_string(daemon_->pid()), "--segment-prefix", prefix},
                &transcript, &status);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << DescribeWaitStatus(status) << "\n"
                                                             << transcript;
  ASSERT_EQ(said["uid"], "65534") << transcript;
  // Nothing to open by name; the daemon's descriptors are not reachable through /proc.
  EXPECT_EQ(said["named"], "0") << transcript;
  EXPECT_EQ(said["open_daemon_fds"], absl::StrCat("opened=0 errno=", EACCES)) << transcript;
  // The read-only descriptor of root's segment stays read-only, whatever is tried.
  EXPECT_EQ(said["reopen_rw"], absl::StrCat("errno=", EACCES)) << transcript;
  EXPECT_EQ(said["mmap_write"], absl::StrCat("errno=", EACCES)) << transcript;
  EXPECT_EQ(said["mprotect_write"], absl::StrCat("errno=", EACCES)) << transcript;
  EXPECT_EQ(said["ftruncate_ro"], absl::StrCat("errno=", EINVAL)) << transcript;
  EXPECT_EQ(said["fallocate_ro"], absl::StrCat("errno=", EBADF)) << transcript;
  EXPECT_EQ(said["punch_hole_ro"], absl::StrCat("errno=", EBADF)) << transcript;
  EXPECT_EQ(said["pwrite_ro"], absl::StrCat("errno=", EBADF)) << transcript;
  EXPECT_EQ(said["fchmod_ro"], absl::StrCat("errno=", EPERM)) << transcript;
  // A leaked session id is worth nothing to another uid.
  EXPECT_EQ(said["attach_victim_session"],
            absl::StrCat("code=", static_cast<int>(absl::StatusCode::kPermissionDenied)))
      << transcript;
  // Nor may it take the daemon over (it keeps serving: the checks below talk to it).
  EXPECT_EQ(said["takeover"],
            absl::StrCat("code=", static_cast<int>(absl::StatusCode::kPermissionDenied)))
      << transcript;
  // Its own writable file holds only its own tensors; its sizes are sealed too.
  EXPECT_EQ(said["same_file"], "0") << transcript;
  EXPECT_EQ(said["ftruncate_rw"], absl::StrCat("errno=", EPERM)) << transcript;
  EXPECT_EQ(said["fallocate_grow_rw"], absl::StrCat("errno=", EPERM)) << transcript;
  EXPECT_NE(said["wrote"], "") << transcript;
  EXPECT_EQ(said.count("done"), 1u) << transcript;

  // Root's bytes are intact, seen through root's mapping and through a fresh Get...
  EXPECT_EQ(FloatsOf(mine->dl_tensor), values);
  {
    std::unique_ptr<Client> other = NewClient();
    ASSERT_NE(other, nullptr);
    ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * again_raw, other->Get("victim/a"));
    TensorPtr again(again_raw);
    EXPECT_EQ(FloatsOf(again->dl_tensor), values);
  }
  // ...and the daemon serves on, the attacker's session and pending tensor gone with it.
  EXPECT_OK(client().Ping());
  ASSERT_OK(PutFloats(client(), "victim/b", {1, 2, 3}));
  EXPECT_TRUE(PollUntil([&] {
    auto s = client().Stats();
    return s.ok() && s->pending == 0 && s->clients == before.clients;
  })) << "the attacker's pending tensor or session outlived it";
}

}  // namespace
}  // namespace tensorbroker::testing
