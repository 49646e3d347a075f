// Implementation of shm_inspect.h: parsing /proc/<pid>/maps and /proc/<pid>/fd, listing /dev/shm.
#include "tests/integration/shm_inspect.h"

#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace tensorbroker::testing {
namespace {

std::string ProcDir(pid_t pid) { return pid == 0 ? "/proc/self" : absl::StrCat("/proc/", pid); }

// "/memfd:tb-x (deleted)" (a segment) or "/dev/shm/tb-x" (a named file, which the daemon must
// never make) -> "tb-x"; anything else -> "".
std::string SegmentNameOf(std::string path) {
  if (absl::EndsWith(path, " (deleted)")) path.resize(path.size() - 10);
  absl::string_view p = path;
  if (!absl::ConsumePrefix(&p, kMemfdPathPrefix) && !absl::ConsumePrefix(&p, "/dev/shm/")) {
    return "";
  }
  if (!absl::StartsWith(p, kSegmentPrefix)) return "";
  return std::string(p);
}

}  // namespace

absl::StatusOr<Mapping> FindMapping(uintptr_t address, pid_t pid) {
  std::ifstream maps(ProcDir(pid) + "/maps");
  if (!maps) return absl::NotFoundError(absl::StrCat("cannot read ", ProcDir(pid), "/maps"));
  std::string line;
  while (std::getline(maps, line)) {
    // start-end perms offset dev inode [path]
    std::istringstream in(line);
    std::string range, perms, offset, dev, inode;
    if (!(in >> range >> perms >> offset >> dev >> inode)) continue;
    const size_t dash = range.find('-');
    if (dash == std::string::npos) continue;
    const uintptr_t start = std::stoull(range.substr(0, dash), nullptr, 16);
    const uintptr_t end = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (address < start || address >= end) continue;
    Mapping m;
    m.start = start;
    m.end = end;
    m.perms = perms;
    m.offset = std::stoull(offset, nullptr, 16);
    m.inode = std::stoull(inode);
    std::string path;
    std::getline(in, path);
    const size_t first = path.find_first_not_of(' ');
    path = first == std::string::npos ? "" : path.substr(first);
    if (absl::EndsWith(path, " (deleted)")) {
      path.resize(path.size() - 10);
      m.deleted = true;
    }
    m.path = path;
    return m;
  }
  return absl::NotFoundError(
      absl::StrFormat("no mapping of %s holds address 0x%x", ProcDir(pid), address));
}

std::set<std::string> ListSegmentFiles(const std::string& prefix) {
  std::set<std::string> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const std::string name = entry.path().filename().string();
    if (absl::StartsWith(name, prefix)) out.insert(name);
  }
  return out;
}

std::string DaemonPrefixOf(const std::string& segment) {
  constexpr size_t kHashDigits = 8;
  const size_t start = sizeof(kSegmentPrefix) - 1;
  const size_t dash = start + kHashDigits;
  if (!absl::StartsWith(segment, kSegmentPrefix) || segment.size() <= dash ||
      segment[dash] != '-') {
    return "";
  }
  for (size_t i = start; i < dash; ++i) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(segment[i]))) return "";
  }
  return segment.substr(0, dash + 1);
}

std::set<std::string> SegmentFilesUsedBy(pid_t pid) {
  std::set<std::string> out;
  std::ifstream maps(ProcDir(pid) + "/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    if (std::string name = SegmentNameOf(line.substr(slash)); !name.empty()) out.insert(name);
  }
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(ProcDir(pid) + "/fd", ec)) {
    std::error_code ec2;
    const auto target = std::filesystem::read_symlink(entry.path(), ec2);
    if (ec2) continue;
    if (std::string name = SegmentNameOf(target.string()); !name.empty()) out.insert(name);
  }
  return out;
}

std::map<std::string, std::string> ParseFields(const std::string& line) {
  std::map<std::string, std::string> out;
  std::istringstream in(line);
  std::string word;
  bool first = true;
  while (in >> word) {
    const size_t eq = word.find('=');
    if (first && eq == std::string::npos) {
      out[""] = word;
    } else if (eq != std::string::npos) {
      out[word.substr(0, eq)] = word.substr(eq + 1);
    }
    first = false;
  }
  return out;
}

std::string HashBytes(const void* data, size_t n) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return absl::StrFormat("%016x", h);
}

}  // namespace tensorbroker::testing
