#include "common/socket_directory.h"

#include <sys/stat.h>

#include <cerrno>
#include <filesystem>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/errno_status.h"
#include "common/socket_path.h"
#include "common/user_names.h"

namespace tensorbroker {
namespace {

std::string ModeText(mode_t mode) { return absl::StrFormat("%04o", mode & 07777); }

absl::Status PerUserRule(const std::string& directory, const struct stat& info, uid_t user) {
  const char* rule = "the per-user socket directory must be its user's own, mode 0700";
  if (info.st_uid != user) {
    return absl::FailedPreconditionError(absl::StrCat(
        "directory ", directory, " is owned by ", DescribeUid(info.st_uid), ", not by uid ", user,
        ": ", rule, " (someone else may have created it first; remove it)"));
  }
  if ((info.st_mode & 07777) != 0700) {
    return absl::FailedPreconditionError(absl::StrCat("directory ", directory, " is mode ",
                                                      ModeText(info.st_mode), ", not 0700: ", rule,
                                                      " (chmod 0700 it)"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string SocketDirectoryOf(const std::string& socket_path) {
  std::filesystem::path parent = std::filesystem::path(socket_path).parent_path();
  if (parent.empty()) parent = ".";
  std::error_code error;
  std::filesystem::path absolute = std::filesystem::absolute(parent, error);
  if (error) absolute = parent;
  std::string text = absolute.lexically_normal().string();
  if (text.size() > 1 && text.back() == '/') text.pop_back();  // "/tmp/d/." -> "/tmp/d/"
  return text;
}

absl::Status CheckPerUserSocketDirectory(const std::string& directory) {
  const std::optional<uid_t> user = PerUserSocketDirectoryOwner(directory);
  if (!user.has_value()) return absl::OkStatus();
  struct stat info {};
  if (::stat(directory.c_str(), &info) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return ErrnoStatus(errno, absl::StrCat("stat ", directory));
  }
  return PerUserRule(directory, info, *user);
}

absl::Status CheckDaemonSocketDirectory(const std::string& directory,
                                        const TrustedServers& servers) {
  struct stat info {};
  if (::stat(directory.c_str(), &info) != 0) {
    return ErrnoStatus(errno, absl::StrCat("stat ", directory));
  }
  if (!S_ISDIR(info.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(directory, " is not a directory"));
  }
  if (std::optional<uid_t> user = PerUserSocketDirectoryOwner(directory); user.has_value()) {
    return PerUserRule(directory, info, *user);
  }
  if (!servers.Trusts(info.st_uid)) {
    return absl::FailedPreconditionError(
        absl::StrCat("directory ", directory, " is owned by ", DescribeUid(info.st_uid),
                     ", not by ", servers.Describe(), ": its owner could replace the socket (set ",
                     kDaemonUserVariable, " to that user if it is the one the broker runs as)"));
  }
  if ((info.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    const char* who =
        (info.st_mode & S_IWOTH) != 0 ? "writable by others" : "writable by its group";
    const char* sticky = (info.st_mode & S_ISVTX) != 0 ? ", sticky like /tmp" : "";
    return absl::FailedPreconditionError(absl::StrCat(
        "directory ", directory, " is mode ", ModeText(info.st_mode), " (", who, sticky,
        "): another user could replace the socket or take its name first; use a directory "
        "only its owner may write (mode 0700, or 0750 to let a group connect)"));
  }
  return absl::OkStatus();
}

}  // namespace tensorbroker
