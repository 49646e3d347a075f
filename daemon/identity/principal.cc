#include "daemon/identity/principal.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tensorbroker::daemon {

bool Principal::InGroup(uint32_t gid) const {
  return std::find(gids.begin(), gids.end(), gid) != gids.end();
}

Principal PeerPrincipal(std::vector<std::string> names) {
  Principal principal;
  principal.uid = kPeerUid;
  principal.peer_names = std::move(names);
  return principal;
}

std::string UserNameOf(uint32_t uid) {
  passwd entry{};
  passwd* found = nullptr;
  std::vector<char> buffer(16384);
  if (::getpwuid_r(uid, &entry, buffer.data(), buffer.size(), &found) != 0 || found == nullptr) {
    return "";
  }
  return found->pw_name;
}

std::string DescribeUid(uint32_t uid) {
  const std::string name = UserNameOf(uid);
  return name.empty() ? absl::StrCat("uid ", uid) : absl::StrCat("uid ", uid, " (", name, ")");
}

std::string DescribePrincipal(const Principal& principal) {
  if (principal.is_peer()) return absl::StrCat("peer ", principal.peer_names.front());
  return DescribeUid(principal.uid);
}

}  // namespace tensorbroker::daemon
