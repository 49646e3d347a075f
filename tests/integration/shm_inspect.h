// Looks at what the kernel says about shared memory: which mapping of /proc/<pid>/maps holds a
// pointer (backing file and inode, file offset, permissions), which tb-* files exist in /dev/shm
// (the daemon must make none: its segments are memfds), and which segments a process has mapped
// or open. Used by the integration tests and the test peer to prove that two processes see the
// very same pages, and that the daemon cleans up.
#ifndef TENSORBROKER_TESTS_INTEGRATION_SHM_INSPECT_H_
#define TENSORBROKER_TESTS_INTEGRATION_SHM_INSPECT_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "absl/status/statusor.h"

namespace tensorbroker::testing {

// The prefix of every segment's name (its memfd's label).
inline constexpr char kSegmentPrefix[] = "tb-";
// How /proc shows a memfd: "/memfd:<name> (deleted)".
inline constexpr char kMemfdPathPrefix[] = "/memfd:";

// One line of /proc/<pid>/maps.
struct Mapping {
  uintptr_t start = 0;
  uintptr_t end = 0;
  std::string perms;     // e.g. "r--s"
  uint64_t offset = 0;   // file offset of `start`
  uint64_t inode = 0;    // of the backing file: equal inodes, the very same file
  std::string path;      // backing file, " (deleted)" stripped
  bool deleted = false;  // the file was unlinked
};

// The mapping of process `pid` (0: this process) that contains `address`.
absl::StatusOr<Mapping> FindMapping(uintptr_t address, pid_t pid = 0);
inline absl::StatusOr<Mapping> FindMapping(const void* p, pid_t pid = 0) {
  return FindMapping(reinterpret_cast<uintptr_t>(p), pid);
}
// The offset in the backing file of `address`, which must lie in `m`.
inline uint64_t FileOffsetOf(const Mapping& m, uintptr_t address) {
  return address - m.start + m.offset;
}

// Names (without "/dev/shm/") of the files in /dev/shm that start with `prefix`. A test looks
// for its own daemon's prefix (DaemonPrefixOf), not for kSegmentPrefix: other processes on the
// machine may make files in /dev/shm whatever a test does.
std::set<std::string> ListSegmentFiles(const std::string& prefix = kSegmentPrefix);
// The part of a segment's name that belongs to one daemon: "tb-<8 hex digits>-", a hash of its
// socket's path (every segment of a daemon on that socket starts with it); "" when `segment` is
// not such a name (e.g. "tb-record", the daemon's record memfds).
std::string DaemonPrefixOf(const std::string& segment);
// Names of the segments (memfds, or /dev/shm files) that process `pid` maps or holds open
// (from /proc/<pid>/maps and /proc/<pid>/fd). Empty when the process is gone.
std::set<std::string> SegmentFilesUsedBy(pid_t pid);

// Parses "word k1=v1 k2=v2 ..." (as the test peer prints) into {"": word, k1: v1, ...}.
std::map<std::string, std::string> ParseFields(const std::string& line);

// FNV-1a 64 of `n` bytes, in hex; how the peer reports tensor contents.
std::string HashBytes(const void* data, size_t n);

}  // namespace tensorbroker::testing

#endif  // TENSORBROKER_TESTS_INTEGRATION_SHM_INSPECT_H_
