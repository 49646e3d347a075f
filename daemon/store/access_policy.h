// Who may do what, as the daemon's configuration says: administrators (root and the members of
// admin-group), the readers a new tensor gets (its request's `readers`, else the longest
// matching readers[PREFIX] rule, else default-readers), who may publish under a name prefix
// (publishers[PREFIX]), and each uid's quota (quota-bytes / quota-tensors, with per-user
// overrides). The store enforces visibility, ownership and quotas with what this decides.
// Immutable once built; thread-safe.
#ifndef TENSORBROKER_DAEMON_ACCESS_POLICY_H_
#define TENSORBROKER_DAEMON_ACCESS_POLICY_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/identity/peer_registry.h"
#include "daemon/identity/principal.h"
#include "daemon/identity/principal_set.h"
#include "daemon/identity/quota.h"
#include "daemon/store/tensor_store.h"

namespace tensorbroker::daemon {

// Rules for the names under one prefix; either may be unset.
struct PrefixRule {
  std::optional<PrincipalSet> readers;     // readers[PREFIX]: the default readers there
  std::optional<PrincipalSet> publishers;  // publishers[PREFIX]: who may publish there
};

struct AccessConfig {
  std::optional<uint32_t> admin_gid;                      // admin-group
  PrincipalSet default_readers = PrincipalSet::Anyone();  // default-readers
  std::map<std::string, PrefixRule> prefix_rules;         // by prefix
  Quota default_quota;                                    // quota-bytes, quota-tensors
  std::map<uint32_t, uint64_t> quota_bytes_by_uid;        // quota-bytes[USER]
  std::map<uint32_t, uint64_t> quota_tensors_by_uid;      // quota-tensors[USER]
};

class AccessPolicy {
 public:
  explicit AccessPolicy(AccessConfig config) : config_(std::move(config)) {}

  // The principal of a connection with the kernel's credentials `peer`.
  Principal PrincipalOf(const PeerCredentials& peer) const;
  // Whether `caller` may publish `spec.name` (publishers rules), then `spec`'s owner and
  // readers: `requested` (validated; INVALID_ARGUMENT naming `field`) or the default for the
  // name. PERMISSION_DENIED naming the rule when `caller` may not publish there.
  absl::Status Admit(const Principal& caller, const std::vector<std::string>& requested,
                     absl::string_view field, TensorSpec* spec) const;
  Quota QuotaFor(uint32_t uid) const;
  const AccessConfig& config() const { return config_; }

 private:
  // The rule of the longest prefix of `name` that sets `which`; nullptr when none.
  const std::pair<const std::string, PrefixRule>* RuleFor(
      const std::string& name, std::optional<PrincipalSet> PrefixRule::*which) const;

  const AccessConfig config_;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_ACCESS_POLICY_H_
