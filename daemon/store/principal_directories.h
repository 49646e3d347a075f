// The read-only directories of issue 34 (docs/architecture.md, "Reads without a round trip"):
// one per principal with a session that asked for one, shared by every session of the same
// principal (the same uid, groups and administrator bit: what decides which names it may read).
// A directory is a sealed memfd (daemon/memory/memfd_segment.h) of kDirectoryRecords records
// that the daemon alone writes (common/directory_records.h) and hands to the principal's
// processes read-only. It holds a record for each name the principal may read, and nothing of
// the others: it reveals nothing Stat would not.
//
// Ownership: owns the memfds and their writers; a directory goes with the last session using it.
// Not thread-safe: the TensorStore calls it under its lock, and writes every record before it
// wakes anyone (the protocol's first step).
#ifndef TENSORBROKER_DAEMON_STORE_PRINCIPAL_DIRECTORIES_H_
#define TENSORBROKER_DAEMON_STORE_PRINCIPAL_DIRECTORIES_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "common/directory_records.h"
#include "daemon/identity/principal.h"
#include "daemon/memory/memfd_segment.h"

namespace tensorbroker::daemon {

// Records in each directory: 2 MiB of memory per principal, reserved when it is made. A
// principal who may read more names than fit (a chain of kMaxProbes records full) has its
// directory marked overflowing: a name it does not find there is asked of the daemon.
inline constexpr uint32_t kDirectoryRecords = 4096;

class PrincipalDirectories {
 public:
  // Whether a principal may read the name's current version.
  using MayRead = std::function<bool(const Principal&)>;
  // Writes every name the principal may read into a new directory (through Publish's writer).
  using Fill = std::function<void(const Principal&, DirectoryWriter*)>;

  // The directory of `principal`, made (and filled by `fill`) when it has none yet; `session`
  // uses it from now on. RESOURCE_EXHAUSTED when memory cannot hold a new one.
  absl::StatusOr<const MemfdSegment*> Open(const std::string& session, const Principal& principal,
                                           const Fill& fill);
  // The directory `session` uses; nullptr when none.
  const MemfdSegment* Find(const std::string& session) const;
  // `session` uses no directory any more (nothing when it used none).
  void Close(const std::string& session);

  // `entry` is now the current version of its name: written into every directory whose
  // principal passes `may_read`, removed from the others.
  void Publish(const DirectoryEntry& entry, const MayRead& may_read);
  // `name` has no published version any more.
  void Unpublish(const std::string& name);

  size_t size() const { return directories_.size(); }
  bool empty() const { return directories_.empty(); }

 private:
  struct Directory {
    Principal principal;
    MemfdSegment memfd;
    DirectoryWriter writer;
    std::set<std::string> sessions;
    bool overflow = false;
  };
  // Writes `entry` into `directory`, marking it overflowing when there is no room.
  static void Write(Directory* directory, const DirectoryEntry& entry);

  std::map<std::string, std::unique_ptr<Directory>> directories_;  // by KeyOf(principal)
  std::map<std::string, std::string> session_keys_;                // session -> its key
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_STORE_PRINCIPAL_DIRECTORIES_H_
