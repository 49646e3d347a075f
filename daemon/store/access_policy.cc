#include "daemon/store/access_policy.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tensorbroker::daemon {

Principal AccessPolicy::PrincipalOf(const PeerCredentials& peer) const {
  Principal principal;
  principal.uid = peer.uid;
  principal.gids.push_back(peer.gid);
  principal.gids.insert(principal.gids.end(), peer.groups.begin(), peer.groups.end());
  principal.admin =
      peer.uid == 0 || (config_.admin_gid.has_value() && principal.InGroup(*config_.admin_gid));
  return principal;
}

const std::pair<const std::string, PrefixRule>* AccessPolicy::RuleFor(
    const std::string& name, std::optional<PrincipalSet> PrefixRule::*which) const {
  const std::pair<const std::string, PrefixRule>* best = nullptr;
  for (const auto& entry : config_.prefix_rules) {
    if (!(entry.second.*which).has_value() || !absl::StartsWith(name, entry.first)) continue;
    if (best == nullptr || entry.first.size() > best->first.size()) best = &entry;
  }
  return best;
}

absl::Status AccessPolicy::Admit(const Principal& caller, const std::vector<std::string>& requested,
                                 absl::string_view field, TensorSpec* spec) const {
  if (const auto* rule = RuleFor(spec->name, &PrefixRule::publishers);
      rule != nullptr && !caller.admin && !rule->second.publishers->Allows(caller)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "name '", spec->name, "': ", DescribeUid(caller.uid), " may not publish under '",
        rule->first, "' (the daemon's publishers[", rule->first, "] is ",
        absl::StrJoin(rule->second.publishers->Entries(), ","), ")"));
  }
  spec->owner_uid = caller.uid;
  if (!requested.empty()) {
    auto readers = PrincipalSet::Parse(requested, field);
    if (!readers.ok()) return readers.status();
    spec->readers = *std::move(readers);
  } else if (const auto* rule = RuleFor(spec->name, &PrefixRule::readers); rule != nullptr) {
    spec->readers = *rule->second.readers;
  } else {
    spec->readers = config_.default_readers;
  }
  return absl::OkStatus();
}

Quota AccessPolicy::QuotaFor(uint32_t uid) const {
  Quota quota = config_.default_quota;
  if (auto it = config_.quota_bytes_by_uid.find(uid); it != config_.quota_bytes_by_uid.end()) {
    quota.bytes = it->second;
  }
  if (auto it = config_.quota_tensors_by_uid.find(uid); it != config_.quota_tensors_by_uid.end()) {
    quota.tensors = it->second;
  }
  return quota;
}

}  // namespace tensorbroker::daemon
