// Who holds a broker socket, told to an operator: the process behind an instance lock or behind a
// listening socket, and how to stop it. Everything is read from /proc (/proc/locks,
// /proc/net/unix, /proc/PID/{comm,status,cgroup,fd}), best effort: what this process may not
// read is left out of the description, never guessed.
//
//   DescribeProcess(ViewProcess(812))
//     -> "pid 812 (tensorbrokerd, user tensorbroker, systemd unit tensorbrokerd.service)"
//   HowToStop(ViewProcess(812))
//     -> "stop it with `systemctl stop tensorbrokerd.socket tensorbrokerd.service`"
//   HowToStop(ViewProcess(4711))  // run by hand
//     -> "stop it with `kill 4711` (tensorbrokerd exits cleanly on SIGTERM)"
//
// Stateless; thread-safe.
#ifndef TENSORBROKER_DAEMON_SOCKET_HOLDER_H_
#define TENSORBROKER_DAEMON_SOCKET_HOLDER_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tensorbroker::daemon {

// The pid that holds a flock(2) on the file with `device` and `inode` (a stat's st_dev, st_ino),
// per /proc/locks; works whoever owns the file and whatever its mode. Nothing when it is not
// locked. The pid is 0 when the holder is in a PID namespace this process cannot see.
std::optional<pid_t> FlockHolder(dev_t device, ino_t inode);
std::optional<pid_t> FlockHolderIn(absl::string_view proc_locks, dev_t device, ino_t inode);

// The socket inode of a listening AF_UNIX socket bound to `path` (as given, or made absolute), per
// /proc/net/unix (this network namespace's). Nothing when none listens there.
std::optional<uint64_t> ListeningSocketAt(const std::string& path);
std::optional<uint64_t> ListeningSocketIn(absl::string_view proc_net_unix, const std::string& path);

// A process that has the socket `inode` open (/proc/*/fd), among those this process may look
// into (all of them as root).
std::optional<pid_t> ProcessWithSocket(uint64_t inode);

// What /proc says of a process.
struct ProcessView {
  pid_t pid = 0;
  bool visible = false;       // /proc/PID exists here (same PID namespace)
  std::string command;        // /proc/PID/comm
  std::optional<uid_t> uid;   // its effective uid
  std::string systemd_unit;   // "tensorbrokerd.service", when systemd runs it
  bool user_manager = false;  // the unit is a user's (systemctl --user)
};
ProcessView ViewProcess(pid_t pid);
// The unit a cgroup line names (/proc/PID/cgroup), "" when none; `user_manager` says whether it
// is under a user's service manager (user@UID.service). Exposed for tests.
std::string SystemdUnitOfCgroup(absl::string_view cgroup, bool* user_manager);

// "pid 812 (tensorbrokerd, user tensorbroker, systemd unit tensorbrokerd.service)".
std::string DescribeProcess(const ProcessView& process);
// "stop it with `...`": systemctl for a broker's unit (one named tensorbroker...; with its socket
// unit for tensorbrokerd.service, or the next connection starts it again), kill for anything
// else (a process in another unit's cgroup was started by hand there, by a CI runner, a shell).
std::string HowToStop(const ProcessView& process);

// OK when no process listens on the socket file at `path` (a file left by a daemon that died),
// FAILED_PRECONDITION naming the listener and how to stop it otherwise: a socket that some
// process serves though no tensorbrokerd holds its lock, such as systemd's tensorbrokerd.socket
// while the service is stopped. Never connects when /proc/net/unix answers (connecting to a
// socket unit would start its service). The message starts with "`flag` `path`: ".
absl::Status CheckNobodyListens(const std::string& path, absl::string_view flag);

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_SOCKET_HOLDER_H_
