#include "cli/socket_wait.h"

#include <errno.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace tensorbroker::cli {
namespace {

constexpr absl::Duration kLookAgain = absl::Milliseconds(20);

// Whether a daemon holds "<socket_path>.lock" now.
bool LockHeld(const std::string& socket_path) {
  struct stat st {};
  if (::stat(absl::StrCat(socket_path, ".lock").c_str(), &st) != 0) return false;
  std::ifstream in("/proc/locks");
  if (!in) return false;  // cannot tell: only the grace is waited
  std::ostringstream text;
  text << in.rdbuf();
  return FlockHeldIn(text.str(), st.st_dev, st.st_ino);
}

}  // namespace

bool FlockHeldIn(absl::string_view proc_locks, dev_t device, ino_t inode) {
  // "1: FLOCK  ADVISORY  WRITE 4711 00:1a:12345 0 EOF"; a waiter's line has "->" after "1:".
  const std::string file =
      absl::StrFormat("%02x:%02x:%u", major(device), minor(device), static_cast<uint64_t>(inode));
  for (absl::string_view line : absl::StrSplit(proc_locks, '\n')) {
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (fields.size() >= 6 && fields[1] == "FLOCK" && fields[5] == file) return true;
  }
  return false;
}

absl::Status AwaitSocketPath(const std::string& socket_path, absl::Duration timeout,
                             absl::Duration grace) {
  const absl::Time start = absl::Now();
  while (true) {
    struct stat st {};
    if (::lstat(socket_path.c_str(), &st) == 0 || errno != ENOENT) return absl::OkStatus();
    const absl::Duration waited = absl::Now() - start;
    if (waited >= timeout || (waited >= grace && !LockHeld(socket_path))) break;
    absl::SleepFor(std::min(kLookAgain, timeout - waited));
  }
  return absl::UnavailableError(
      absl::StrCat(socket_path,
                   " does not exist: no tensorbrokerd serves there (is it running? see --socket "
                   "/ $TENSORBROKER_SOCKET)"));
}

}  // namespace tensorbroker::cli
