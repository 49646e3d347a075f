#include "daemon/base/descriptor_reserve.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"

namespace tensorbroker::daemon {
namespace {

// The lowest free descriptor, or -1 when none is free.
long LowestFreeDescriptor() {
  int probe = ::fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 0);
  if (probe < 0 && errno == EBADF) probe = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (probe < 0) return -1;
  ::close(probe);
  return probe;
}

size_t SoftLimit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 0;
  return static_cast<size_t>(limit.rlim_cur);
}

}  // namespace

bool DescriptorsToSpare(size_t reserve) {
  const size_t limit = SoftLimit();
  if (limit == 0) return true;
  const long lowest = LowestFreeDescriptor();
  return lowest >= 0 && static_cast<size_t>(lowest) + reserve < limit;
}

absl::Status CheckDescriptorsToSpare(const char* what, size_t reserve) {
  if (DescriptorsToSpare(reserve)) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      what, ": the daemon is out of descriptors to spare (it keeps the last ", reserve, " of its ",
      SoftLimit(), " for its own work); try again when tensors or connections have gone"));
}

}  // namespace tensorbroker::daemon
