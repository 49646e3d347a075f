#include "tests/support/process_footprint.h"

#include <dirent.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tensorbroker::testing {
namespace {

size_t CountEntries(const std::string& directory) {
  size_t n = 0;
  if (DIR* dir = ::opendir(directory.c_str())) {
    while (const dirent* entry = ::readdir(dir)) n += entry->d_name[0] != '.';
    ::closedir(dir);
  }
  return n;
}

}  // namespace

int64_t CpuTimeNs(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {  // fields 14 and 15 (1-based)
    if (i == 14) utime = std::stoll(field);
    if (i == 15) stime = std::stoll(field);
  }
  return (utime + stime) * (1000000000LL / ::sysconf(_SC_CLK_TCK));
}

void KeepAsanQuarantineSmall() {
  const char* options = std::getenv("ASAN_OPTIONS");
  const std::string small = absl::StrCat(
      options != nullptr ? options : "", options != nullptr && *options != '\0' ? ":" : "",
      "quarantine_size_mb=16:thread_local_quarantine_size_kb=256");
  ::setenv("ASAN_OPTIONS", small.c_str(), 1);
}

ProcessFootprint FootprintOf(pid_t pid) {
  const std::string proc = absl::StrCat("/proc/", pid);
  ProcessFootprint footprint;
  footprint.fds = CountEntries(proc + "/fd");
  footprint.threads = CountEntries(proc + "/task");
  std::ifstream status(proc + "/status");
  for (std::string line; std::getline(status, line);) {
    const auto kib = [&line] {
      return std::strtoul(line.c_str() + line.find(':') + 1, nullptr, 10);
    };
    if (line.rfind("RssAnon:", 0) == 0) footprint.rss_anon_kib = kib();
    if (line.rfind("RssShmem:", 0) == 0) footprint.rss_shmem_kib = kib();
  }
  return footprint;
}

std::string Describe(const ProcessFootprint& footprint) {
  return absl::StrFormat("fds %d, threads %d, RssAnon %.1f MiB, RssShmem %.1f MiB", footprint.fds,
                         footprint.threads, footprint.rss_anon_kib / 1024.0,
                         footprint.rss_shmem_kib / 1024.0);
}

}  // namespace tensorbroker::testing
