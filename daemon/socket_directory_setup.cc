#include "daemon/socket_directory_setup.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/errno_status.h"
#include "common/socket_directory.h"

namespace tensorbroker::daemon {
namespace {

// mkdir -p, every directory it makes mode 0700 whatever the umask.
absl::Status CreateMissing(const std::string& directory) {
  std::filesystem::path prefix;
  for (const std::filesystem::path& part : std::filesystem::path(directory)) {
    prefix /= part;
    struct stat info {};
    if (::stat(prefix.c_str(), &info) == 0) continue;
    if (errno != ENOENT) return ErrnoStatus(errno, absl::StrCat("stat ", prefix.string()));
    if (::mkdir(prefix.c_str(), 0700) != 0) {
      if (errno == EEXIST) continue;  // made meanwhile; checked below like any other
      return ErrnoStatus(errno, absl::StrCat("cannot create directory ", prefix.string()));
    }
    if (::chmod(prefix.c_str(), 0700) != 0) {
      return ErrnoStatus(errno, absl::StrCat("chmod 0700 ", prefix.string()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status PrepareSocketDirectory(const std::string& socket_path) {
  const std::string directory = SocketDirectoryOf(socket_path);
  absl::Status status = CreateMissing(directory);
  if (status.ok()) status = CheckDaemonSocketDirectory(directory, ::geteuid());
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat("--socket ", socket_path, ": ", status.message()));
}

}  // namespace tensorbroker::daemon
