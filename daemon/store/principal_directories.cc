#include "daemon/store/principal_directories.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/base/log.h"
#include "daemon/memory/memory_pool.h"

namespace tensorbroker::daemon {
namespace {

constexpr uint64_t kPageBytes = 4096;

// What decides which names a principal may read: its uid, its groups and the administrator bit.
std::string KeyOf(const Principal& principal) {
  std::vector<uint32_t> gids = principal.gids;
  std::sort(gids.begin(), gids.end());
  gids.erase(std::unique(gids.begin(), gids.end()), gids.end());
  return absl::StrCat(principal.uid, principal.admin ? "+admin" : "", ":",
                      absl::StrJoin(gids, ","));
}

}  // namespace

absl::StatusOr<const MemfdSegment*> PrincipalDirectories::Open(const std::string& session,
                                                               const Principal& principal,
                                                               const Fill& fill) {
  const std::string key = KeyOf(principal);
  if (auto it = session_keys_.find(session); it != session_keys_.end() && it->second != key) {
    Close(session);
  }
  auto it = directories_.find(key);
  if (it == directories_.end()) {
    const uint64_t bytes = RoundUp(DirectoryBytes(kDirectoryRecords), kPageBytes);
    auto memfd =
        MemfdSegment::Create(absl::StrCat("tensorbroker-directory-uid", principal.uid), bytes);
    if (!memfd.ok()) return memfd.status();
    if (absl::Status s = DirectoryWriter::Format(memfd->data(), bytes, kDirectoryRecords);
        !s.ok()) {
      return s;
    }
    void* base = memfd->data();
    auto directory = std::unique_ptr<Directory>(new Directory{
        principal, *std::move(memfd), DirectoryWriter(base, kDirectoryRecords), {}, false});
    fill(principal, &directory->writer);
    it = directories_.emplace(key, std::move(directory)).first;
  }
  it->second->sessions.insert(session);
  session_keys_[session] = key;
  return &it->second->memfd;
}

const MemfdSegment* PrincipalDirectories::Find(const std::string& session) const {
  auto key = session_keys_.find(session);
  if (key == session_keys_.end()) return nullptr;
  auto it = directories_.find(key->second);
  return it == directories_.end() ? nullptr : &it->second->memfd;
}

void PrincipalDirectories::Close(const std::string& session) {
  auto key = session_keys_.find(session);
  if (key == session_keys_.end()) return;
  auto it = directories_.find(key->second);
  session_keys_.erase(key);
  if (it == directories_.end()) return;
  it->second->sessions.erase(session);
  if (it->second->sessions.empty()) directories_.erase(it);
}

void PrincipalDirectories::Write(Directory* directory, const DirectoryEntry& entry) {
  if (directory->writer.Publish(entry).ok() || directory->overflow) return;
  directory->overflow = true;
  directory->writer.SetOverflow(true);
  Log(LogLevel::kWarning, "the directory of ", DescribePrincipal(directory->principal),
      " is full (", kDirectoryRecords, " records): names it does not hold are asked of the daemon");
}

void PrincipalDirectories::Publish(const DirectoryEntry& entry, const MayRead& may_read) {
  for (auto& [key, directory] : directories_) {
    if (may_read(directory->principal)) {
      Write(directory.get(), entry);
    } else {
      directory->writer.Unpublish(entry.name);
    }
  }
}

void PrincipalDirectories::Unpublish(const std::string& name) {
  for (auto& [key, directory] : directories_) directory->writer.Unpublish(name);
}

}  // namespace tensorbroker::daemon
