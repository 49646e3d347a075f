// tensorbroker_attack_peer: a hostile local user. Started as root by attack_test.cc, it drops to
// uid 65534 (keeping group 0, the socket's group, so that it may connect) before anything else,
// then tries every unprivileged way into another user's tensors and prints one line per try:
//   "<try> errno=<E>"     a system call that must fail, with the errno it failed with (0: it
//                         succeeded, which the test calls a breach)
//   "<try> code=<CODE>"   a call the daemon must refuse, with its gRPC code
//   "wrote <N>"           bytes written through the whole writable mapping of its own tensor
// and "done" last. Tries: open segments by name, reach the daemon's descriptors, write through
// or resize a read-only descriptor, attach the victim's session, take over the daemon, and
// stray outside its own writable file. Usage:
//   tensorbroker_attack_peer --socket S --victim NAME --victim-session ID --daemon-pid PID
//                            [--segment-prefix P]
// --segment-prefix: the names of the victim daemon's segments start with P (default "tb-"):
// the files in /dev/shm it counts (the victim's, not what other processes put there).
#include <fcntl.h>
#include <grp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/fd_passing.h"
#include "tensorbroker/client.h"
#include "tensorbroker/v1/local.pb.h"
#include "tests/integration/peer_output.h"
#include "tests/integration/shm_inspect.h"

namespace {

using tensorbroker::testing::FindMapping;

using tensorbroker::testing::Say;

[[noreturn]] void Die(const std::string& why) {
  Say("fatal " + why);
  std::exit(3);
}

// errno of a call that returned `rc` (0 when it succeeded).
int ErrnoOf(long rc) { return rc < 0 ? errno : 0; }
void Report(const std::string& what, long rc) { Say(absl::StrCat(what, " errno=", ErrnoOf(rc))); }

// The descriptor this process holds for the memfd that `address` is mapped from.
int DescriptorOf(const void* address) {
  auto mapping = FindMapping(address);
  if (!mapping.ok()) Die(std::string(mapping.status().message()));
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    const std::string target = std::filesystem::read_symlink(entry.path(), error).string();
    if (!error && target == mapping->path + " (deleted)") {
      return std::stoi(entry.path().filename().string());
    }
  }
  Die("no descriptor of " + mapping->path);
}

// Sends `request` on a new local channel connection as this uid; the daemon's code.
int LocalCode(const std::string& socket_path, tensorbroker::v1::LocalRequest request) {
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const std::string path = socket_path + ".fd";
  path.copy(address.sun_path, sizeof(address.sun_path) - 1);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    Die(absl::StrCat("connect ", path, ": ", std::strerror(errno)));
  }
  request.set_request_id(1);
  if (!tensorbroker::SendMessage(fd, request.SerializeAsString()).ok()) Die("send");
  auto received = tensorbroker::ReceiveMessage(fd, 1 << 16);
  ::close(fd);
  tensorbroker::v1::LocalReply reply;
  if (!received.ok() || !reply.ParseFromString(received->bytes)) Die("no reply");
  if (!received->fds.empty()) Die("the daemon sent descriptors with a refusal");
  return reply.code();
}

}  // namespace

int main(int argc, char** argv) {
  std::string socket_path, victim, victim_session, segment_prefix = "tb-";
  long daemon_pid = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--socket") socket_path = argv[i + 1];
    if (flag == "--victim") victim = argv[i + 1];
    if (flag == "--victim-session") victim_session = argv[i + 1];
    if (flag == "--daemon-pid") daemon_pid = std::atol(argv[i + 1]);
    if (flag == "--segment-prefix") segment_prefix = argv[i + 1];
  }
  if (socket_path.empty() || victim.empty() || victim_session.empty() || daemon_pid == 0) {
    Die("usage: --socket S --victim NAME --victim-session ID --daemon-pid PID");
  }
  // Become nobody, in the socket's group (root's, as the test runs the daemon as root).
  if (::setgroups(0, nullptr) != 0 || ::setresgid(0, 0, 0) != 0 ||
      ::setresuid(65534, 65534, 65534) != 0) {
    Die(absl::StrCat("dropping to uid 65534: ", std::strerror(errno)));
  }
  ::prctl(PR_SET_DUMPABLE, 1);  // its own /proc/self, as any ordinary process of that uid
  Say(absl::StrCat("uid ", ::getuid()));

  // 1. By name: nothing in /dev/shm; the daemon's own descriptors are not ours to open.
  int named = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    named += entry.path().filename().string().rfind(segment_prefix, 0) == 0;
  }
  Say(absl::StrCat("named ", named));
  int opened = 0, first_errno = 0;
  for (int n = 0; n < 64; ++n) {
    const int fd = ::open(absl::StrCat("/proc/", daemon_pid, "/fd/", n).c_str(), O_RDWR);
    if (fd >= 0) {
      ++opened;
      ::close(fd);
    } else if (first_errno == 0 && errno != ENOENT) {
      first_errno = errno;
    }
  }
  Say(absl::StrCat("open_daemon_fds opened=", opened, " errno=", first_errno));

  auto client = tensorbroker::Client::Connect(socket_path);
  if (!client.ok()) Die(absl::StrCat("connect: ", client.status().ToString()));

  // 2. The victim's sealed tensor, through the read-only descriptor the daemon handed us.
  auto got = (*client)->Get(victim);
  if (!got.ok()) Die(absl::StrCat("get: ", got.status().ToString()));
  tensorbroker::TensorPtr sealed(*got);
  const int ro = DescriptorOf(sealed->dl_tensor.data);
  const off_t size = ::lseek(ro, 0, SEEK_END);
  Report("reopen_rw", ::open(absl::StrCat("/proc/self/fd/", ro).c_str(), O_RDWR));
  void* writable =
      ::mmap(nullptr, static_cast<size_t>(size), PROT_READ | PROT_WRITE, MAP_SHARED, ro, 0);
  Report("mmap_write", writable == MAP_FAILED ? -1 : 0);
  const long page = ::sysconf(_SC_PAGESIZE);
  void* view_page =
      reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(sealed->dl_tensor.data) / page * page);
  Report("mprotect_write",
         ::mprotect(view_page, static_cast<size_t>(page), PROT_READ | PROT_WRITE));
  Report("ftruncate_ro", ::ftruncate(ro, 0));
  Report("fallocate_ro", ::fallocate(ro, 0, 0, size + page));
  Report("punch_hole_ro", ::fallocate(ro, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, page));
  const char junk = 'x';
  Report("pwrite_ro", ::pwrite(ro, &junk, 1, 0));
  Report("fchmod_ro", ::fchmod(ro, 0666));

  // 3. The victim's session, whose id leaked: refused for another uid.
  tensorbroker::v1::LocalRequest attach;
  attach.mutable_attach()->set_session_id(victim_session);
  Say(absl::StrCat("attach_victim_session code=", LocalCode(socket_path, attach)));
  // The daemon itself: a takeover would hand it every tensor, the sockets and the lock.
  tensorbroker::v1::LocalRequest takeover;
  takeover.mutable_takeover();
  Say(absl::StrCat("takeover code=", LocalCode(socket_path, takeover)));

  // 4. Its own pending tensor: a writable descriptor, but of a file holding only its tensors.
  auto created = (*client)->Create("attacker/own", {1000}, tensorbroker::dtypes::kUInt8);
  if (!created.ok()) Die(absl::StrCat("create: ", created.status().ToString()));
  tensorbroker::TensorPtr own(*created);
  const int rw = DescriptorOf(own->dl_tensor.data);
  auto own_file = FindMapping(own->dl_tensor.data);
  auto victim_file = FindMapping(sealed->dl_tensor.data);
  if (!own_file.ok() || !victim_file.ok()) Die("mappings");
  Say(absl::StrCat("same_file ", own_file->inode == victim_file->inode ? 1 : 0));
  const off_t own_size = ::lseek(rw, 0, SEEK_END);
  Report("ftruncate_rw", ::ftruncate(rw, 0));
  Report("fallocate_grow_rw", ::fallocate(rw, 0, 0, own_size + page));
  auto mapping = FindMapping(own->dl_tensor.data);
  if (!mapping.ok()) Die("own mapping");
  std::memset(reinterpret_cast<void*>(mapping->start), 0xEE, mapping->end - mapping->start);
  Say(absl::StrCat("wrote ", mapping->end - mapping->start));
  own.reset();
  sealed.reset();
  Say("done");
  return 0;
}
