#include "daemon/net/socket_holder.h"

#include <dirent.h>
#include <sys/socket.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/unique_fd.h"
#include "common/user_names.h"

namespace tensorbroker::daemon {
namespace {

// A small /proc file, whole; nothing when it cannot be read.
std::optional<std::string> ReadProcFile(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "re");
  if (file == nullptr) return std::nullopt;
  std::string text;
  char buffer[4096];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file)) > 0) text.append(buffer, n);
  std::fclose(file);
  return text;
}

std::vector<absl::string_view> Fields(absl::string_view line) {
  return absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
}

std::string AbsolutePath(const std::string& path) {
  std::error_code error;
  const std::filesystem::path absolute = std::filesystem::absolute(path, error);
  return error ? path : absolute.lexically_normal().string();
}

bool IsTensorbrokerService(const ProcessView& process) {
  return process.systemd_unit == "tensorbrokerd.service";
}

// A unit that runs a broker (tensorbrokerd.service, or an operator's own tensorbroker@x.service),
// as opposed to one whose processes started it by hand (a CI runner's, a terminal's), which
// stopping would take down with it.
bool IsBrokerUnit(const ProcessView& process) {
  return absl::StrContains(process.systemd_unit, "tensorbroker");
}

}  // namespace

std::optional<pid_t> FlockHolderIn(absl::string_view proc_locks, dev_t device, ino_t inode) {
  // "1: FLOCK  ADVISORY  WRITE 4711 00:1a:12345 0 EOF"; a waiter's line has "->" after "1:".
  const std::string file = absl::StrCat(absl::Hex(major(device), absl::kZeroPad2), ":",
                                        absl::Hex(minor(device), absl::kZeroPad2), ":", inode);
  for (absl::string_view line : absl::StrSplit(proc_locks, '\n')) {
    std::vector<absl::string_view> fields = Fields(line);
    if (fields.size() < 6 || fields[1] == "->" || fields[1] != "FLOCK") continue;
    if (fields[5] != file) continue;
    int pid = 0;
    if (!absl::SimpleAtoi(fields[4], &pid) || pid < 0) continue;
    return static_cast<pid_t>(pid);
  }
  return std::nullopt;
}

std::optional<pid_t> FlockHolder(dev_t device, ino_t inode) {
  std::optional<std::string> locks = ReadProcFile("/proc/locks");
  if (!locks.has_value()) return std::nullopt;
  return FlockHolderIn(*locks, device, inode);
}

std::optional<uint64_t> ListeningSocketIn(absl::string_view proc_net_unix,
                                          const std::string& path) {
  // "Num RefCount Protocol Flags Type St Inode Path"; Flags has __SO_ACCEPTCON (0x10000) when it
  // listens. A path with spaces is the last field, whole.
  constexpr unsigned long kAcceptingConnections = 0x10000;
  const std::string absolute = AbsolutePath(path);
  bool header = true;
  for (absl::string_view line : absl::StrSplit(proc_net_unix, '\n')) {
    if (std::exchange(header, false)) continue;
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::MaxSplits(' ', 7), absl::SkipEmpty());
    if (fields.size() < 8) continue;
    unsigned long flags = 0;
    uint64_t inode = 0;
    if (!absl::SimpleHexAtoi(fields[3], &flags) || (flags & kAcceptingConnections) == 0 ||
        !absl::SimpleAtoi(fields[6], &inode)) {
      continue;
    }
    const absl::string_view bound = absl::StripAsciiWhitespace(fields[7]);
    if (bound == path || bound == absolute) return inode;
  }
  return std::nullopt;
}

std::optional<uint64_t> ListeningSocketAt(const std::string& path) {
  std::optional<std::string> table = ReadProcFile("/proc/net/unix");
  if (!table.has_value()) return std::nullopt;
  return ListeningSocketIn(*table, path);
}

std::optional<pid_t> ProcessWithSocket(uint64_t inode) {
  const std::string wanted = absl::StrCat("socket:[", inode, "]");
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return std::nullopt;
  std::optional<pid_t> found;
  while (!found.has_value()) {
    const dirent* process = ::readdir(proc);
    if (process == nullptr) break;
    int pid = 0;
    if (!absl::SimpleAtoi(process->d_name, &pid)) continue;
    const std::string fd_dir = absl::StrCat("/proc/", pid, "/fd");
    DIR* fds = ::opendir(fd_dir.c_str());
    if (fds == nullptr) continue;  // gone, or another user's
    while (const dirent* fd = ::readdir(fds)) {
      char target[64] = {};
      const std::string link = absl::StrCat(fd_dir, "/", fd->d_name);
      const ssize_t n = ::readlink(link.c_str(), target, sizeof(target) - 1);
      if (n > 0 && absl::string_view(target, static_cast<size_t>(n)) == wanted) {
        found = static_cast<pid_t>(pid);
        break;
      }
    }
    ::closedir(fds);
  }
  ::closedir(proc);
  return found;
}

std::string SystemdUnitOfCgroup(absl::string_view cgroup, bool* user_manager) {
  // "0::/system.slice/tensorbrokerd.service" (cgroup v2), "1:name=systemd:/system.slice/..."
  // (v1), "0::/user.slice/user-1000.slice/user@1000.service/app.slice/x.service" (a user's).
  std::string unit;
  *user_manager = false;
  for (absl::string_view line : absl::StrSplit(cgroup, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3 || (parts[0] != "0" && parts[1] != "name=systemd")) continue;
    bool under_user_manager = false;
    for (absl::string_view segment : absl::StrSplit(parts[2], '/', absl::SkipEmpty())) {
      if (!absl::EndsWith(segment, ".service")) continue;
      if (absl::StartsWith(segment, "user@")) {
        under_user_manager = true;
        unit.clear();
        continue;
      }
      unit = std::string(segment);
      *user_manager = under_user_manager;
    }
    if (!unit.empty()) return unit;
  }
  return unit;
}

ProcessView ViewProcess(pid_t pid) {
  ProcessView view;
  view.pid = pid;
  const std::string dir = absl::StrCat("/proc/", pid);
  if (pid <= 0 || ::access(dir.c_str(), F_OK) != 0) return view;
  view.visible = true;
  if (std::optional<std::string> comm = ReadProcFile(dir + "/comm")) {
    view.command = std::string(absl::StripTrailingAsciiWhitespace(*comm));
  }
  if (std::optional<std::string> status = ReadProcFile(dir + "/status")) {
    for (absl::string_view line : absl::StrSplit(*status, '\n')) {
      if (!absl::ConsumePrefix(&line, "Uid:")) continue;
      std::vector<absl::string_view> ids = Fields(line);  // real, effective, saved, fs
      uid_t uid = 0;
      if (ids.size() >= 2 && absl::SimpleAtoi(ids[1], &uid)) view.uid = uid;
    }
  }
  if (std::optional<std::string> cgroup = ReadProcFile(dir + "/cgroup")) {
    view.systemd_unit = SystemdUnitOfCgroup(*cgroup, &view.user_manager);
  }
  return view;
}

std::string DescribeProcess(const ProcessView& process) {
  if (process.pid == 0) return "a process in a PID namespace not visible from here";
  if (!process.visible) {
    return absl::StrCat("pid ", process.pid,
                        " (not visible from here: another PID namespace, such as a container's)");
  }
  std::vector<std::string> details;
  if (!process.command.empty()) details.push_back(process.command);
  if (process.uid.has_value()) {
    const std::optional<std::string> name = UserName(*process.uid);
    details.push_back(absl::StrCat("user ", name.has_value() ? *name : absl::StrCat(*process.uid)));
  }
  if (!process.systemd_unit.empty()) {
    details.push_back(
        absl::StrCat(process.user_manager ? "user's " : "", "systemd unit ", process.systemd_unit));
  }
  if (details.empty()) return absl::StrCat("pid ", process.pid);
  return absl::StrCat("pid ", process.pid, " (", absl::StrJoin(details, ", "), ")");
}

std::string HowToStop(const ProcessView& process) {
  if (process.pid == 0 || !process.visible) return "stop it where it runs";
  if (IsBrokerUnit(process)) {
    const char* systemctl = process.user_manager ? "systemctl --user stop " : "systemctl stop ";
    // The socket unit would start the service again at the next connection.
    const std::string units = IsTensorbrokerService(process)
                                  ? "tensorbrokerd.socket tensorbrokerd.service"
                                  : process.systemd_unit;
    return absl::StrCat("stop it with `", systemctl, units, "`");
  }
  if (process.command == "systemd") {  // a service manager listening for a socket unit
    const char* systemctl = process.pid == 1 ? "systemctl stop " : "systemctl --user stop ";
    return absl::StrCat(
        "it listens for a socket unit (tensorbrokerd.socket, when the package is "
        "installed, starts the service at the first connection); stop it with `",
        systemctl, "tensorbrokerd.socket`");
  }
  return absl::StrCat("stop it with `kill ", process.pid, "`",
                      process.command == "tensorbrokerd" ? " (it exits cleanly on SIGTERM)" : "");
}

absl::Status CheckNobodyListens(const std::string& path, absl::string_view flag) {
  std::optional<pid_t> listener;
  bool listening = false;
  if (std::optional<uint64_t> inode = ListeningSocketAt(path); inode.has_value()) {
    listening = true;
    listener = ProcessWithSocket(*inode);
  } else {
    // Not in this network namespace's table (or no /proc): ask the socket itself. ECONNREFUSED
    // (nobody listens), EACCES (another user's file; its listener would be in the table) and
    // ENOENT (gone meanwhile) all mean a file left behind.
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    if (path.size() >= sizeof(address.sun_path)) return absl::OkStatus();  // bind says so
    std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
    const UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (probe.valid() &&
        ::connect(probe.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0) {
      listening = true;
      ucred peer{};
      socklen_t size = sizeof(peer);
      if (::getsockopt(probe.get(), SOL_SOCKET, SO_PEERCRED, &peer, &size) == 0) {
        listener = peer.pid;
      }
    }
  }
  if (!listening) return absl::OkStatus();
  std::string who = "a process this user may not look into";
  std::string stop =
      "stop it (systemd's tensorbrokerd.socket, if the package is installed: `systemctl stop "
      "tensorbrokerd.socket`)";
  if (listener.has_value()) {
    const ProcessView process = ViewProcess(*listener);
    who = DescribeProcess(process);
    stop = HowToStop(process);
  }
  return absl::FailedPreconditionError(absl::StrCat(
      flag, " ", path, ": a socket there is served by ", who,
      ", though no tensorbrokerd holds its lock; ", stop, ", or choose another --socket"));
}

}  // namespace tensorbroker::daemon
