// A set of principals written as a list of entries: `uid:N`, `gid:N`, `user:NAME`,
// `group:NAME`, `peer:NAME` (a broker whose certificate has that name, see --peer-listen), or
// `*` (anyone who may connect to the daemon, peers included). Used for a tensor's readers and a
// name prefix's publishers. Names are resolved (NSS) when the set is parsed, so a set holds
// numbers only and checking it never blocks. Values only; thread-safe to copy and read.
#ifndef TENSORBROKER_DAEMON_PRINCIPAL_SET_H_
#define TENSORBROKER_DAEMON_PRINCIPAL_SET_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/identity/principal.h"

namespace tensorbroker::daemon {

// Most entries in one set, and the longest entry.
inline constexpr size_t kMaxPrincipalSetEntries = 64;
inline constexpr size_t kMaxPrincipalEntryLength = 258;  // "peer:" and a 253-character name

class PrincipalSet {
 public:
  static PrincipalSet Anyone();
  // INVALID_ARGUMENT naming `field` and the entry (e.g. "readers[1]: no user named 'bob'").
  // An empty list is refused too: it would admit no one.
  static absl::StatusOr<PrincipalSet> Parse(const std::vector<std::string>& entries,
                                            absl::string_view field);
  // The same from one comma-separated text (flags, config values): "uid:1000,group:ml".
  static absl::StatusOr<PrincipalSet> ParseList(absl::string_view text, absl::string_view field);

  bool Allows(const Principal& principal) const;
  // This set with `uid` added (unchanged when it admits anyone already).
  PrincipalSet WithUid(uint32_t uid) const;
  bool anyone() const { return anyone_; }
  // Canonical entries, numbers only: {"*"} or {"uid:1000", "gid:27", "peer:broker-b"} (uids
  // first, then gids, then peers, each sorted).
  std::vector<std::string> Entries() const;
  // The entries joined with ',': equal sets give equal keys.
  std::string Key() const;

  friend bool operator==(const PrincipalSet& a, const PrincipalSet& b) {
    return a.anyone_ == b.anyone_ && a.uids_ == b.uids_ && a.gids_ == b.gids_ &&
           a.peers_ == b.peers_;
  }

 private:
  bool anyone_ = false;
  std::set<uint32_t> uids_;
  std::set<uint32_t> gids_;
  std::set<std::string> peers_;
};

// Whether `name` may follow "peer:": 1 to 253 letters, digits, '.', '-' and '_' (a DNS name or
// a plain common name).
bool IsValidPeerName(absl::string_view name);

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_PRINCIPAL_SET_H_
