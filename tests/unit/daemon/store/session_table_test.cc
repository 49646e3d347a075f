// SessionTable: ids, the uid check, pending/expired/ephemeral bookkeeping, descriptions and
// sinks.
#include "daemon/store/session_table.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace tensorbroker::daemon {
namespace {

class RecordingSink : public SessionEventSink {
 public:
  void OnSegmentRemoved(const std::string& segment) override { removed.push_back(segment); }
  std::vector<std::string> removed;
};

TEST(SessionTable, OpenGivesDistinctUnguessableIds) {
  SessionTable sessions;
  const std::string a = sessions.Open(Principal{1000, {}, false, {}}, 1, "a", nullptr);
  const std::string b = sessions.Open(Principal{1000, {}, false, {}}, 2, "b", nullptr);
  EXPECT_EQ(a.size(), 32u);  // 128 bits, in hex
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(a, b);
  EXPECT_EQ(sessions.size(), 2u);
}

TEST(SessionTable, CheckAndCheckUser) {
  SessionTable sessions;
  const std::string id = sessions.Open(Principal{1000, {1000}, false, {}}, 1, "", nullptr);
  EXPECT_TRUE(sessions.Check(id).ok());
  const absl::Status closed = absl::FailedPreconditionError(
      "session_id: not an open session; open the Session stream first");
  EXPECT_EQ(sessions.Check("nope"), closed);
  EXPECT_EQ(sessions.CheckUser("nope", 1000), closed);
  EXPECT_TRUE(sessions.CheckUser(id, 1000).ok());
  EXPECT_EQ(
      sessions.CheckUser(id, 1001),
      absl::PermissionDeniedError("session_id: the session belongs to another user (uid 1000)"));
  EXPECT_EQ(sessions.PrincipalOf(id).uid, 1000u);
  EXPECT_EQ(sessions.PrincipalOf(id).gids, std::vector<uint32_t>{1000});
}

TEST(SessionTable, DescriptionFollowsHello) {
  SessionTable sessions;
  const std::string id = sessions.Open(Principal{1000, {}, false, {}}, 42, "", nullptr);
  EXPECT_EQ(sessions.Description(id), " pid 42");
  sessions.UpdateHello(id, 43, "trainer");
  EXPECT_EQ(sessions.Description(id), " pid 43 (trainer)");
  sessions.UpdateHello("nope", 1, "x");  // nothing
  EXPECT_EQ(sessions.Description("nope"), "");
  EXPECT_EQ(sessions.size(), 1u);
}

TEST(SessionTable, PendingExpiredAndEphemeral) {
  SessionTable sessions;
  const std::string id = sessions.Open(Principal{1000, {}, false, {}}, 1, "", nullptr);
  sessions.AddPending(id, "a");
  sessions.AddPending(id, "b");
  sessions.AddPending("", "put");  // a Put's owner is no session: nothing
  sessions.ExpirePending(id, "a");
  sessions.ExpirePending("", "put");
  EXPECT_TRUE(sessions.TakeExpired(id, "a"));
  EXPECT_FALSE(sessions.TakeExpired(id, "a"));  // reported once
  EXPECT_FALSE(sessions.TakeExpired(id, "b"));
  // A new Create of an expired name forgets the expiry.
  sessions.ExpirePending(id, "b");
  sessions.AddPending(id, "b");
  EXPECT_FALSE(sessions.TakeExpired(id, "b"));
  sessions.AddPending(id, "c");
  sessions.EndPending(id, "c");
  sessions.AddEphemeral(id, "seat", 7);

  std::optional<SessionTable::Session> closed = sessions.Close(id);
  ASSERT_TRUE(closed.has_value());
  EXPECT_EQ(closed->pid, 1);
  EXPECT_EQ(closed->pending_names, (std::set<std::string>{"b"}));
  EXPECT_TRUE(closed->expired_names.empty());
  EXPECT_EQ(closed->ephemeral, (std::map<std::string, uint64_t>{{"seat", 7}}));
  EXPECT_EQ(sessions.size(), 0u);
  EXPECT_FALSE(sessions.Close(id).has_value());  // idempotent
  EXPECT_EQ(sessions.Check(id).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(SessionTable, NotifySegmentsRemovedReachesEverySink) {
  SessionTable sessions;
  RecordingSink one;
  RecordingSink two;
  sessions.Open(Principal{1000, {}, false, {}}, 1, "", &one);
  sessions.Open(Principal{1001, {}, false, {}}, 2, "", nullptr);
  const std::string second = sessions.Open(Principal{1002, {}, false, {}}, 3, "", &two);
  sessions.NotifySegmentsRemoved({});
  sessions.NotifySegmentsRemoved({"seg1", "seg2"});
  EXPECT_EQ(one.removed, (std::vector<std::string>{"seg1", "seg2"}));
  EXPECT_EQ(two.removed, (std::vector<std::string>{"seg1", "seg2"}));
  sessions.Close(second);
  sessions.NotifySegmentsRemoved({"seg3"});
  EXPECT_EQ(one.removed, (std::vector<std::string>{"seg1", "seg2", "seg3"}));
  EXPECT_EQ(two.removed.size(), 2u);
}

}  // namespace
}  // namespace tensorbroker::daemon
