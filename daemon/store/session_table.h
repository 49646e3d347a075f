// The broker's client sessions: who opened each (its principal, pid and name), where its events
// go, and the names it has pending, has had aborted by the pending timeout, and has published
// ephemeral. A session id is 128 random bits: a bearer token, so never guessable and never put in
// a message.
//
// Not thread-safe: the TensorStore calls it only while holding its own lock (and so calls the
// sinks with that lock held).
#ifndef TENSORBROKER_DAEMON_SESSION_TABLE_H_
#define TENSORBROKER_DAEMON_SESSION_TABLE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "daemon/identity/principal.h"

namespace tensorbroker::daemon {

// Receives events for one session. Called with the store's lock held: must not call back into
// the store, and should only queue.
class SessionEventSink {
 public:
  virtual ~SessionEventSink() = default;
  virtual void OnSegmentRemoved(const std::string& segment) = 0;
};

class SessionTable {
 public:
  struct Session {
    Principal principal;
    int32_t pid = 0;
    std::string client_name;
    SessionEventSink* sink = nullptr;  // may be null
    std::set<std::string> pending_names;
    std::set<std::string> expired_names;        // aborted by the pending timeout, not yet reported
    std::map<std::string, uint64_t> ephemeral;  // name -> object id, sealed ephemeral in it
  };

  // Opens a session of `principal` and returns its new id.
  std::string Open(const Principal& principal, int32_t pid, const std::string& client_name,
                   SessionEventSink* sink);
  // FAILED_PRECONDITION when `session_id` is not open.
  absl::Status Check(const std::string& session_id) const;
  // Check, then PERMISSION_DENIED for a session of another uid than `uid`.
  absl::Status CheckUser(const std::string& session_id, uint32_t uid) const;
  // The principal of the open session `session_id` (Check it first).
  const Principal& PrincipalOf(const std::string& session_id) const;
  // Nothing happens for a session that is not open.
  void UpdateHello(const std::string& session_id, int32_t pid, const std::string& client_name);
  // Forgets the session and returns what it held; nullopt when it was not open.
  std::optional<Session> Close(const std::string& session_id);

  // `name` is pending for `session_id` (a new Create: an earlier expiry of it is forgotten).
  // Nothing happens for a session that is not open (a Put's owner is none).
  void AddPending(const std::string& session_id, const std::string& name);
  // `name` is no longer pending for the open session `session_id` (sealed or aborted).
  void EndPending(const std::string& session_id, const std::string& name);
  // `name`, pending for `session_id`, was aborted by the pending timeout: reported once, by
  // TakeExpired. Nothing happens for a session that is not open.
  void ExpirePending(const std::string& session_id, const std::string& name);
  // Whether `name` expired for the open session `session_id` since; forgets it.
  bool TakeExpired(const std::string& session_id, const std::string& name);
  // The open session `session_id` sealed `name` (object `object_id`) ephemeral.
  void AddEphemeral(const std::string& session_id, const std::string& name, uint64_t object_id);

  // " pid 42 (client)" for log lines ("" for a session that is not open, " pid 42" unnamed).
  std::string Description(const std::string& session_id) const;
  // Tells every session's sink that `segments` are gone.
  void NotifySegmentsRemoved(const std::vector<std::string>& segments) const;

  size_t size() const { return sessions_.size(); }

 private:
  std::map<std::string, Session> sessions_;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_SESSION_TABLE_H_
