#include "daemon/net/connection_limits.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/base/descriptor_reserve.h"

namespace tensorbroker::daemon {

ConnectionLimit::ConnectionLimit(std::string what, size_t max_connections, uid_t own_uid)
    : max_(max_connections), own_uid_(own_uid), refusals_(std::move(what)) {}

bool ConnectionLimit::Admit(uid_t uid, size_t open) {
  const bool own = uid == own_uid_;
  const size_t limit = own ? max_ + kReservedConnections : max_;
  // Another user's connection also needs descriptors to spare (descriptor_reserve.h).
  const bool too_many = open >= limit;
  if (!too_many && (own || DescriptorsToSpare())) return true;
  NoteRefusal(absl::StrCat(open, " connections open (--max-connections ", max_,
                           too_many ? ")"
                                    : "; no descriptors to spare beyond those kept for "
                                      "the daemon's own uid)"),
              absl::StrCat("of uid ", uid));
  return false;
}

bool ConnectionLimit::AdmitFromHost(absl::string_view host, size_t open, size_t from_host) {
  const size_t per_host = std::min(max_, kMaxConnectionsPerHost);
  if (open < max_ && from_host < per_host && DescriptorsToSpare()) return true;
  std::string why;
  if (open >= max_) {
    why = absl::StrCat(open, " connections open (--max-connections ", max_, ")");
  } else if (from_host >= per_host) {
    why = absl::StrCat(from_host, " connections open from ", host, " (at most ", per_host,
                       " from one host)");
  } else {
    why = absl::StrCat(open,
                       " connections open; no descriptors to spare beyond those kept for "
                       "the daemon's own uid");
  }
  NoteRefusal(why, absl::StrCat("from ", host));
  return false;
}

void ConnectionLimit::NoteRefusal(absl::string_view why, absl::string_view last) {
  refusals_.Note("", why, "connection(s)", last);  // one key: a line per 10 s, whatever why
}

}  // namespace tensorbroker::daemon
