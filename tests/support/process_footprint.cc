#include "tests/support/process_footprint.h"

#include <dirent.h>

#include <cstdlib>
#include <fstream>

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
