#include "daemon/net/socket_directory_setup.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/errno_status.h"
#include "common/server_identity.h"
#include "common/socket_directory.h"
#include "common/user_names.h"

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

// The socket, its lock file and the local channel are made there by this daemon's uid.
absl::Status CheckWritable(const std::string& directory) {
  if (::faccessat(AT_FDCWD, directory.c_str(), W_OK | X_OK, AT_EACCESS) == 0) {
    return absl::OkStatus();
  }
  const int error = errno;
  struct stat info {};
  const std::string owner = ::stat(directory.c_str(), &info) == 0
                                ? absl::StrCat(" (owner ", DescribeUid(info.st_uid), ", mode ",
                                               absl::StrFormat("%04o", info.st_mode & 07777), ")")
                                : "";
  return absl::FailedPreconditionError(
      absl::StrCat("directory ", directory, owner, " does not let this daemon's ",
                   DescribeUid(::geteuid()), " create files there: ", std::strerror(error)));
}

}  // namespace

absl::Status PrepareSocketDirectory(const std::string& socket_path) {
  const std::string directory = SocketDirectoryOf(socket_path);
  absl::Status status = CreateMissing(directory);
  if (status.ok()) {
    auto servers = TrustedServersOfThisProcess();
    status = servers.ok() ? CheckDaemonSocketDirectory(directory, *servers) : servers.status();
  }
  if (status.ok()) status = CheckWritable(directory);
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat("--socket ", socket_path, ": ", status.message()));
}

}  // namespace tensorbroker::daemon
