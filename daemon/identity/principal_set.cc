#include "daemon/identity/principal_set.h"

#include <grp.h>
#include <pwd.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <optional>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tensorbroker::daemon {
namespace {

// The uid of user `name` (getpwnam_r), or nullopt.
std::optional<uint32_t> UidOfUser(const std::string& name) {
  passwd entry{};
  passwd* found = nullptr;
  std::vector<char> buffer(16384);
  if (::getpwnam_r(name.c_str(), &entry, buffer.data(), buffer.size(), &found) != 0 ||
      found == nullptr) {
    return std::nullopt;
  }
  return found->pw_uid;
}

std::optional<uint32_t> GidOfGroup(const std::string& name) {
  group entry{};
  group* found = nullptr;
  // Groups with many members need a large buffer; grow it while the library says ERANGE.
  std::vector<char> buffer(16384);
  while (true) {
    const int rc = ::getgrnam_r(name.c_str(), &entry, buffer.data(), buffer.size(), &found);
    if (rc == ERANGE && buffer.size() < (1u << 24)) {
      buffer.resize(buffer.size() * 4);
      continue;
    }
    if (rc != 0 || found == nullptr) return std::nullopt;
    return found->gr_gid;
  }
}

constexpr char kEntryKinds[] = "uid:N, gid:N, user:NAME, group:NAME, peer:NAME or *";

absl::StatusOr<uint32_t> ParseId(absl::string_view digits, absl::string_view field,
                                 absl::string_view entry) {
  uint32_t id = 0;
  // (uint32_t)-1 is no one: chown and setresuid read it as "unchanged".
  if (!absl::SimpleAtoi(digits, &id) || id == std::numeric_limits<uint32_t>::max() ||
      !absl::ascii_isdigit(digits.empty() ? 'x' : digits.front())) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": '", entry, "' is not a valid id (a number below 4294967295)"));
  }
  return id;
}

}  // namespace

PrincipalSet PrincipalSet::Anyone() {
  PrincipalSet set;
  set.anyone_ = true;
  return set;
}

absl::StatusOr<PrincipalSet> PrincipalSet::Parse(const std::vector<std::string>& entries,
                                                 absl::string_view field) {
  if (entries.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": empty; list ", kEntryKinds, " (anyone)"));
  }
  if (entries.size() > kMaxPrincipalSetEntries) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", entries.size(), " entries; at most ", kMaxPrincipalSetEntries));
  }
  PrincipalSet set;
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string at = absl::StrCat(field, "[", i, "]");
    absl::string_view entry = absl::StripAsciiWhitespace(entries[i]);
    if (entry.size() > kMaxPrincipalEntryLength) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, ": longer than ", kMaxPrincipalEntryLength, " characters"));
    }
    absl::string_view rest = entry;
    if (entry == "*") {
      set.anyone_ = true;
    } else if (absl::ConsumePrefix(&rest, "uid:")) {
      auto id = ParseId(rest, at, entry);
      if (!id.ok()) return id.status();
      set.uids_.insert(*id);
    } else if (absl::ConsumePrefix(&rest, "gid:")) {
      auto id = ParseId(rest, at, entry);
      if (!id.ok()) return id.status();
      set.gids_.insert(*id);
    } else if (absl::ConsumePrefix(&rest, "user:")) {
      std::optional<uint32_t> uid = UidOfUser(std::string(rest));
      if (rest.empty() || !uid.has_value()) {
        return absl::InvalidArgumentError(absl::StrCat(at, ": no user named '", rest, "'"));
      }
      set.uids_.insert(*uid);
    } else if (absl::ConsumePrefix(&rest, "group:")) {
      std::optional<uint32_t> gid = GidOfGroup(std::string(rest));
      if (rest.empty() || !gid.has_value()) {
        return absl::InvalidArgumentError(absl::StrCat(at, ": no group named '", rest, "'"));
      }
      set.gids_.insert(*gid);
    } else if (absl::ConsumePrefix(&rest, "peer:")) {
      if (!IsValidPeerName(rest)) {
        return absl::InvalidArgumentError(absl::StrCat(
            at, ": '", entry, "' is not a peer name (1 to 253 letters, digits, '.', '-' and '_')"));
      }
      set.peers_.insert(std::string(rest));
    } else {
      return absl::InvalidArgumentError(absl::StrCat(at, ": '", entry, "' is not ", kEntryKinds));
    }
  }
  if (set.anyone_) {
    set.uids_.clear();
    set.gids_.clear();
    set.peers_.clear();
  }
  return set;
}

absl::StatusOr<PrincipalSet> PrincipalSet::ParseList(absl::string_view text,
                                                     absl::string_view field) {
  std::vector<std::string> entries = absl::StrSplit(text, ',', absl::SkipWhitespace());
  return Parse(entries, field);
}

bool PrincipalSet::Allows(const Principal& principal) const {
  if (anyone_) return true;
  if (principal.is_peer()) {  // by its certificate's names alone: never by uid or gid
    for (const std::string& name : principal.peer_names) {
      if (peers_.count(name) > 0) return true;
    }
    return false;
  }
  if (uids_.count(principal.uid) > 0) return true;
  for (uint32_t gid : principal.gids) {
    if (gids_.count(gid) > 0) return true;
  }
  return false;
}

PrincipalSet PrincipalSet::WithUid(uint32_t uid) const {
  PrincipalSet set = *this;
  if (!set.anyone_) set.uids_.insert(uid);
  return set;
}

std::vector<std::string> PrincipalSet::Entries() const {
  if (anyone_) return {"*"};
  std::vector<std::string> entries;
  for (uint32_t uid : uids_) entries.push_back(absl::StrCat("uid:", uid));
  for (uint32_t gid : gids_) entries.push_back(absl::StrCat("gid:", gid));
  for (const std::string& peer : peers_) entries.push_back(absl::StrCat("peer:", peer));
  return entries;
}

bool IsValidPeerName(absl::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(c) || c == '.' || c == '-' || c == '_';
  });
}

std::string PrincipalSet::Key() const { return absl::StrJoin(Entries(), ","); }

}  // namespace tensorbroker::daemon
