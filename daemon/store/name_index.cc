#include "daemon/store/name_index.h"

namespace tensorbroker::daemon {

NameIndex::Published* NameIndex::Find(const std::string& name) {
  auto it = published_.find(name);
  return it == published_.end() ? nullptr : &it->second;
}

const NameIndex::Published* NameIndex::Find(const std::string& name) const {
  auto it = published_.find(name);
  return it == published_.end() ? nullptr : &it->second;
}

uint64_t NameIndex::Publish(const std::string& name, uint32_t owner_uid, uint32_t keep,
                            uint64_t version, uint64_t object_id) {
  auto [entry, first] = published_.try_emplace(name);
  uint64_t previous = 0;
  if (first) {
    entry->second.owner_uid = owner_uid;
  } else {
    previous = entry->second.current();
  }
  entry->second.keep = keep;
  entry->second.versions.emplace(version, object_id);
  return previous;
}

bool NameIndex::MayAdopt(const std::string& name, uint32_t owner_uid, uint64_t version) const {
  if (IsPending(name)) return false;
  const Published* existing = Find(name);
  return existing == nullptr ||
         (existing->owner_uid == owner_uid && existing->versions.count(version) == 0);
}

void NameIndex::Adopt(const std::string& name, uint32_t owner_uid, uint32_t keep, uint64_t version,
                      uint64_t object_id) {
  Published& entry = published_[name];
  entry.owner_uid = owner_uid;
  entry.versions.emplace(version, object_id);
  // The name keeps what its newest version asked for.
  if (entry.versions.rbegin()->first == version) entry.keep = keep;
}

uint64_t NameIndex::RemoveVersion(const std::string& name, uint64_t version) {
  auto& versions = published_.at(name).versions;
  auto it = versions.find(version);
  const uint64_t object_id = it->second;
  versions.erase(it);
  return object_id;
}

void NameIndex::Erase(const std::string& name) { published_.erase(name); }

void NameIndex::AddPending(const std::string& name, uint64_t object_id) {
  pending_.emplace(name, object_id);
}

void NameIndex::ErasePending(const std::string& name) { pending_.erase(name); }

std::optional<uint64_t> NameIndex::PendingObject(const std::string& name) const {
  auto it = pending_.find(name);
  if (it == pending_.end()) return std::nullopt;
  return it->second;
}

}  // namespace tensorbroker::daemon
