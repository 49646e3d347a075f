// The broker's names: each published name's owner, keep and kept versions (version -> tensor
// object id), and each pending name (created or being Put, not yet published) -> its object. A
// name may be pending and published at once (a replacement on the way). Only ids: the objects
// themselves are the TensorStore's.
//
// Not thread-safe: the TensorStore calls it only while holding its own lock.
#ifndef TENSORBROKER_DAEMON_NAME_INDEX_H_
#define TENSORBROKER_DAEMON_NAME_INDEX_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace tensorbroker::daemon {

class NameIndex {
 public:
  // A published name: its current version and the older ones it keeps (TensorSpec::keep).
  struct Published {
    uint32_t owner_uid = 0;                 // the uid that published the name first
    uint32_t keep = 1;                      // the newest publication's keep
    std::map<uint64_t, uint64_t> versions;  // version -> object id, ascending; never empty
    uint64_t current() const { return versions.rbegin()->second; }
  };

  // Published names. The one called `name`; nullptr when none.
  Published* Find(const std::string& name);
  const Published* Find(const std::string& name) const;
  // Every published name, in name order.
  const std::map<std::string, Published>& published() const { return published_; }
  // Publishes `version` (object `object_id`) as the current version of `name`, which keeps
  // `keep` from now on; a name published for the first time belongs to `owner_uid`. Returns the
  // object id of the version it follows (it stays kept), or 0 for a new name.
  uint64_t Publish(const std::string& name, uint32_t owner_uid, uint32_t keep, uint64_t version,
                   uint64_t object_id);
  // Whether a version `version` of `name` published by a previous instance may be taken back:
  // `name` is not pending, and is either not published or belongs to `owner_uid` and does not
  // keep `version`.
  bool MayAdopt(const std::string& name, uint32_t owner_uid, uint64_t version) const;
  // Takes such a version back (MayAdopt): `keep` becomes the name's only if it is the newest.
  void Adopt(const std::string& name, uint32_t owner_uid, uint32_t keep, uint64_t version,
             uint64_t object_id);
  // Forgets the kept `version` of the published `name` and returns its object id. The name
  // stays (with what versions are left) until Erase.
  uint64_t RemoveVersion(const std::string& name, uint64_t version);
  // Forgets the published `name`, whatever versions it keeps.
  void Erase(const std::string& name);

  // Pending names.
  void AddPending(const std::string& name, uint64_t object_id);
  void ErasePending(const std::string& name);  // nothing for a name not pending
  bool IsPending(const std::string& name) const { return pending_.count(name) != 0; }
  // The object pending under `name`; nullopt when none.
  std::optional<uint64_t> PendingObject(const std::string& name) const;
  // Every pending name -> object id, in name order.
  const std::map<std::string, uint64_t>& pending() const { return pending_; }

 private:
  std::map<std::string, Published> published_;
  std::map<std::string, uint64_t> pending_;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_NAME_INDEX_H_
