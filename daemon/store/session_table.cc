#include "daemon/store/session_table.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "daemon/base/log.h"

namespace tensorbroker::daemon {
namespace {

// 128 random bits: a session id is a bearer token, so it must not be guessable.
std::string NewSessionId() {
  std::random_device random;
  std::string id;
  for (int i = 0; i < 4; ++i) absl::StrAppend(&id, absl::Hex(random(), absl::kZeroPad8));
  return id;
}

}  // namespace

std::string SessionTable::Open(const Principal& principal, int32_t pid,
                               const std::string& client_name, SessionEventSink* sink) {
  std::string id = NewSessionId();
  sessions_[id] = Session{principal, pid, client_name, sink, {}, {}, {}};
  return id;
}

absl::Status SessionTable::Check(const std::string& session_id) const {
  if (sessions_.count(session_id) == 0) {
    // The id itself is left out: session ids are capabilities, and this message is logged.
    return absl::FailedPreconditionError(
        "session_id: not an open session; open the Session stream first");
  }
  return absl::OkStatus();
}

absl::Status SessionTable::CheckUser(const std::string& session_id, uint32_t uid) const {
  if (absl::Status s = Check(session_id); !s.ok()) return s;
  const uint32_t owner = sessions_.at(session_id).principal.uid;
  if (owner != uid) {
    return absl::PermissionDeniedError(
        absl::StrCat("session_id: the session belongs to another user (uid ", owner, ")"));
  }
  return absl::OkStatus();
}

const Principal& SessionTable::PrincipalOf(const std::string& session_id) const {
  return sessions_.at(session_id).principal;
}

void SessionTable::UpdateHello(const std::string& session_id, int32_t pid,
                               const std::string& client_name) {
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return;
  it->second.pid = pid;
  it->second.client_name = client_name;
}

std::optional<SessionTable::Session> SessionTable::Close(const std::string& session_id) {
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return std::nullopt;
  Session session = std::move(it->second);
  sessions_.erase(it);
  return session;
}

void SessionTable::AddPending(const std::string& session_id, const std::string& name) {
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return;
  it->second.pending_names.insert(name);
  it->second.expired_names.erase(name);
}

void SessionTable::EndPending(const std::string& session_id, const std::string& name) {
  sessions_.at(session_id).pending_names.erase(name);
}

void SessionTable::ExpirePending(const std::string& session_id, const std::string& name) {
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return;
  it->second.pending_names.erase(name);
  // Reported at the creator's next Seal or Abort; bounded by what it had pending.
  it->second.expired_names.insert(name);
}

bool SessionTable::TakeExpired(const std::string& session_id, const std::string& name) {
  return sessions_.at(session_id).expired_names.erase(name) > 0;
}

void SessionTable::AddEphemeral(const std::string& session_id, const std::string& name,
                                uint64_t object_id) {
  sessions_.at(session_id).ephemeral[name] = object_id;
}

std::string SessionTable::Description(const std::string& session_id) const {
  auto session = sessions_.find(session_id);
  if (session == sessions_.end()) return "";
  return absl::StrCat(" pid ", session->second.pid, session->second.client_name.empty() ? "" : " (",
                      LogSafe(session->second.client_name),
                      session->second.client_name.empty() ? "" : ")");
}

void SessionTable::NotifySegmentsRemoved(const std::vector<std::string>& segments) const {
  if (segments.empty()) return;
  for (const auto& [id, session] : sessions_) {
    if (session.sink == nullptr) continue;
    for (const std::string& segment : segments) session.sink->OnSegmentRemoved(segment);
  }
}

}  // namespace tensorbroker::daemon
