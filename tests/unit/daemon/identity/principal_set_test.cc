// PrincipalSet with peers (peer:NAME): parsing, canonical entries, and who a set admits. A peer
// is admitted by its certificate's names alone, never by a uid or gid entry.
#include "daemon/identity/principal_set.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tensorbroker::daemon {
namespace {

Principal Local(uint32_t uid, std::vector<uint32_t> gids = {}) {
  Principal principal;
  principal.uid = uid;
  principal.gids = std::move(gids);
  return principal;
}

TEST(PrincipalSetPeers, ParsesPeerEntriesIntoCanonicalOrder) {
  auto set = PrincipalSet::Parse({"peer:node-b.example", "gid:27", "uid:1000", "peer:broker_a"},
                                 "readers");
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->Entries(), (std::vector<std::string>{"uid:1000", "gid:27", "peer:broker_a",
                                                      "peer:node-b.example"}));
  EXPECT_EQ(set->Key(), "uid:1000,gid:27,peer:broker_a,peer:node-b.example");
  auto again = PrincipalSet::Parse(set->Entries(), "readers");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *set);
}

TEST(PrincipalSetPeers, AdmitsAPeerByAnyOfItsNamesOnly) {
  auto set = PrincipalSet::Parse({"uid:4294967294", "gid:0", "peer:node-b"}, "readers");
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_TRUE(set->Allows(PeerPrincipal({"broker", "node-b"})));
  EXPECT_FALSE(set->Allows(PeerPrincipal({"node-c"})));
  // A peer is never a uid or a group: its kPeerUid and no gids match nothing.
  auto by_uid = PrincipalSet::Parse({"uid:0", "gid:0"}, "readers");
  ASSERT_TRUE(by_uid.ok());
  EXPECT_FALSE(by_uid->Allows(PeerPrincipal({"node-b"})));
  // And a local user is never a peer.
  EXPECT_FALSE(set->Allows(Local(1000, {1000})));
  EXPECT_TRUE(set->Allows(Local(1000, {0})));
}

TEST(PrincipalSetPeers, AnyoneAdmitsPeersToo) {
  auto set = PrincipalSet::Parse({"peer:node-b", "*"}, "readers");
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->Entries(), std::vector<std::string>{"*"});
  EXPECT_TRUE(set->Allows(PeerPrincipal({"node-z"})));
}

TEST(PrincipalSetPeers, RefusesBadPeerNamesNamingTheEntry) {
  const std::vector<std::string> bad = {"peer:", "peer:a b", "peer:x,y",
                                        "peer:" + std::string(254, 'a'), "peer:caf\xc3\xa9"};
  for (const std::string& entry : bad) {
    auto set = PrincipalSet::Parse({"uid:1", entry}, "readers");
    ASSERT_FALSE(set.ok()) << entry;
    EXPECT_EQ(set.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(set.status().message().rfind("readers[1]: ", 0), 0u) << set.status().message();
  }
  auto ok = PrincipalSet::Parse({"peer:" + std::string(253, 'a')}, "readers");
  EXPECT_TRUE(ok.ok()) << ok.status();
}

TEST(PrincipalSetPeers, DescribesPeersByTheirFirstName) {
  EXPECT_EQ(DescribePrincipal(PeerPrincipal({"node-b", "b.example"})), "peer node-b");
  EXPECT_EQ(DescribePrincipal(Local(4242)).rfind("uid 4242", 0), 0u);
  EXPECT_TRUE(PeerPrincipal({"x"}).is_peer());
  EXPECT_FALSE(Local(0).is_peer());
  EXPECT_FALSE(PeerPrincipal({"x"}).admin);
}

}  // namespace
}  // namespace tensorbroker::daemon
