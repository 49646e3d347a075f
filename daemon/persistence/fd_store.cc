#include "daemon/persistence/fd_store.h"

#include <systemd/sd-daemon.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace tensorbroker::daemon {
namespace {

absl::Status Send(const std::string& state, int* fds, unsigned n_fds) {
  const int sent =
      sd_pid_notify_with_fds(/*pid=*/0, /*unset_environment=*/0, state.c_str(), fds, n_fds);
  if (sent > 0) return absl::OkStatus();
  if (sent == 0) return absl::UnavailableError("$NOTIFY_SOCKET is not set");
  return absl::UnavailableError(absl::StrCat("cannot tell the service manager (",
                                             state.substr(0, state.find('\n')),
                                             "): ", std::strerror(-sent)));
}

}  // namespace

absl::Status ValidateFdName(absl::string_view name) {
  if (name.empty() || name.size() > 255) {
    return absl::InvalidArgumentError(
        absl::StrCat("descriptor name has ", name.size(), " characters (1 to 255)"));
  }
  for (char c : name) {
    if (c < 0x20 || c > 0x7e || c == ':') {
      return absl::InvalidArgumentError(
          absl::StrCat("descriptor name '", name, "' holds a ':' or a non-printable character"));
    }
  }
  return absl::OkStatus();
}

FdStore FdStore::FromEnvironment() {
  const char* socket = std::getenv("NOTIFY_SOCKET");
  return FdStore(socket != nullptr && socket[0] != '\0');
}

absl::Status FdStore::Store(absl::string_view name, int fd) const {
  if (!enabled_) return absl::OkStatus();
  if (absl::Status valid = ValidateFdName(name); !valid.ok()) return valid;
  return Send(absl::StrCat("FDSTORE=1\nFDNAME=", name), &fd, 1);
}

absl::Status FdStore::Remove(absl::string_view name) const {
  if (!enabled_) return absl::OkStatus();
  if (absl::Status valid = ValidateFdName(name); !valid.ok()) return valid;
  return Send(absl::StrCat("FDSTOREREMOVE=1\nFDNAME=", name), nullptr, 0);
}

}  // namespace tensorbroker::daemon
