#include "common/server_identity.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/errno_status.h"
#include "common/socket_directory.h"
#include "common/unique_fd.h"
#include "common/user_names.h"

namespace tensorbroker {
namespace {

std::string NameOf(uid_t uid) {
  if (uid == 0) return "root";
  std::optional<std::string> name = UserName(uid);
  return name.has_value() ? *name : absl::StrCat("uid ", uid);
}

}  // namespace

bool TrustedServers::Trusts(uid_t uid) const {
  return uid == 0 || uid == self || (daemon_user.has_value() && uid == *daemon_user);
}

std::string TrustedServers::Describe() const {
  std::vector<std::string> names = {"root"};
  if (daemon_user.has_value() && *daemon_user != 0) {
    names.push_back(absl::StrCat(NameOf(*daemon_user), *daemon_user == self ? " (you)" : ""));
  }
  if (self != 0 && (!daemon_user.has_value() || *daemon_user != self)) {
    names.push_back(absl::StrCat("uid ", self, " (you)"));
  }
  if (names.size() == 1) return names[0];
  const std::string last = names.back();
  names.pop_back();
  return absl::StrCat(absl::StrJoin(names, ", "), " or ", last);
}

absl::StatusOr<TrustedServers> TrustedServersFor(uid_t self,
                                                 const std::string& daemon_user_setting) {
  TrustedServers trusted;
  trusted.self = self;
  if (!daemon_user_setting.empty()) {
    auto uid = ParseUser(daemon_user_setting, absl::StrCat("$", kDaemonUserVariable));
    if (!uid.ok()) return uid.status();
    trusted.daemon_user = *uid;
  } else {
    trusted.daemon_user = UidOfUser(kDefaultDaemonUser);
  }
  return trusted;
}

absl::StatusOr<TrustedServers> TrustedServersOfThisProcess() {
  const char* setting = std::getenv(kDaemonUserVariable);
  return TrustedServersFor(::geteuid(), setting != nullptr ? setting : "");
}

absl::Status CheckServerIdentity(int connected_fd, const std::string& socket_path) {
  ucred peer{};
  socklen_t size = sizeof(peer);
  if (::getsockopt(connected_fd, SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0) {
    return ErrnoStatus(errno, absl::StrCat("SO_PEERCRED of ", socket_path));
  }
  auto trusted = TrustedServersOfThisProcess();
  if (!trusted.ok()) return trusted.status();
  if (trusted->Trusts(peer.uid)) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("socket ", socket_path, " is served by ", DescribeUid(peer.uid), ", not by ",
                   trusted->Describe(), ": refusing to trust it (if that is your broker, set ",
                   kDaemonUserVariable, " to the user it runs as)"));
}

absl::Status VerifyServerAt(const std::string& socket_path) {
  if (absl::Status directory = CheckPerUserSocketDirectory(SocketDirectoryOf(socket_path));
      !directory.ok()) {
    return absl::Status(directory.code(), absl::StrCat("refusing to trust socket ", socket_path,
                                                       ": ", directory.message()));
  }
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "socket path '", socket_path, "' is longer than ", sizeof(address.sun_path) - 1, " bytes"));
  }
  socket_path.copy(address.sun_path, socket_path.size());
  UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!probe.valid()) return absl::UnavailableError(absl::StrCat("socket(): ", strerror(errno)));
  if (::connect(probe.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    const int error = errno;
    if (error == EACCES || error == EPERM) {
      return absl::PermissionDeniedError(absl::StrCat(
          "may not connect to ", socket_path, ": ", strerror(error),
          " (the daemon's socket is mode 0660: run as its user or a member of its group)"));
    }
    return absl::UnavailableError(absl::StrCat(socket_path, ": ", strerror(error)));
  }
  return CheckServerIdentity(probe.get(), socket_path);
}

}  // namespace tensorbroker
