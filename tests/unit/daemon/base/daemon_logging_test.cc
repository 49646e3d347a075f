// What the daemon's log lines are made of: client text escaped into one line (LogSafe), and
// the peer registry's answer for gRPC's peer strings.
#include <gtest/gtest.h>

#include <string>

#include "daemon/base/log.h"
#include "daemon/identity/peer_registry.h"

namespace tensorbroker::daemon {
namespace {

TEST(LogSafe, EscapesControlBytesQuotesAndBackslashesKeepsTheRest) {
  EXPECT_EQ(LogSafe("frames/0"), "frames/0");
  EXPECT_EQ(LogSafe("a\nb"), "a\\nb");
  EXPECT_EQ(LogSafe(std::string("a\0b\x01\x7f", 5)), "a\\x00b\\x01\\x7f");
  EXPECT_EQ(LogSafe("say \"hi\" \\ bye"), "say \\\"hi\\\" \\\\ bye");
  // Bytes >= 0x80 too: the line stays ASCII, so an invalid UTF-8 name cannot turn it into an
  // unreadable "[blob data]" in journald.
  EXPECT_EQ(LogSafe("caf\xc3\xa9 \xff"), "caf\\xc3\\xa9 \\xff");
}

TEST(LogSafe, CutsLongTextAndSaysSo) {
  EXPECT_EQ(LogSafe(std::string(300, 'x')), std::string(256, 'x') + "...");
  EXPECT_EQ(LogSafe("abcdef", 3), "abc...");
  EXPECT_EQ(LogSafe("abc", 3), "abc");
}

TEST(PeerRegistry, FindsConnectionsByGrpcsFdPeerNames) {
  PeerRegistry peers;
  peers.Register(7, {1234, 1000, 100, {}});
  auto found = peers.Lookup("fd:7");
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->pid, 1234);
  EXPECT_EQ(found->uid, 1000u);
  EXPECT_EQ(found->gid, 100u);
  EXPECT_EQ(peers.Describe("fd:7"), "pid=1234 uid=1000");
  // A reused descriptor number is a new connection: its entry is replaced.
  peers.Register(7, {99, 0, 0, {}});
  EXPECT_EQ(peers.Describe("fd:7"), "pid=99 uid=0");
  // Anything else is unknown.
  for (const char* peer : {"fd:8", "unix:/run/x.sock", "fd:", "fd:x", "ipv4:127.0.0.1:1", ""}) {
    EXPECT_FALSE(peers.Lookup(peer).has_value()) << peer;
    EXPECT_EQ(peers.Describe(peer), "pid=? uid=?") << peer;
  }
}

}  // namespace
}  // namespace tensorbroker::daemon
