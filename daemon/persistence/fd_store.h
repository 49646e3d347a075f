// Keeps descriptors with the service manager, which outlives the daemon: systemd's
// file-descriptor store (sd_pid_notify_with_fds(3) with FDSTORE=1 and FDNAME=, removed with
// FDSTOREREMOVE=1). What is stored comes back to the next instance through LISTEN_FDS and
// LISTEN_FDNAMES (listen_fds.h). The unit must allow it (FileDescriptorStoreMax=).
//
// Without $NOTIFY_SOCKET (not started by systemd) the store is disabled and every call does
// nothing. Messages on one notification socket are processed in the order sent, so a removal
// sent before memory is reused reaches the service manager first. Thread-safe (sd_notify is);
// the caller keeps ownership of every descriptor it stores (the service manager gets a copy).
#ifndef TENSORBROKER_DAEMON_FD_STORE_H_
#define TENSORBROKER_DAEMON_FD_STORE_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tensorbroker::daemon {

// OK when `name` may be an FDNAME: 1 to 255 printable ASCII characters, no ':' (the separator
// of $LISTEN_FDNAMES). INVALID_ARGUMENT otherwise.
absl::Status ValidateFdName(absl::string_view name);

class FdStore {
 public:
  // Enabled when $NOTIFY_SOCKET is set.
  static FdStore FromEnvironment();
  static FdStore Disabled() { return FdStore(false); }

  bool enabled() const { return enabled_; }
  // Sends a copy of `fd` to be kept under `name` (names are unique: a second descriptor under
  // one name is kept beside the first). UNAVAILABLE when the service manager cannot be told.
  absl::Status Store(absl::string_view name, int fd) const;
  // Drops every descriptor kept under `name`.
  absl::Status Remove(absl::string_view name) const;

 private:
  explicit FdStore(bool enabled) : enabled_(enabled) {}

  bool enabled_;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_FD_STORE_H_
