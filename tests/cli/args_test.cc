// Direct tests of the `tensorbroker` tool's argument parser (cli/args.h): each command's flags,
// options around the command, "--", and the exact usage errors for missing, unknown and bad
// flags and arguments.
#include "cli/args.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tensorbroker::cli {
namespace {

using ::testing::ElementsAre;

absl::StatusOr<Invocation> Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "tensorbroker");
  return ParseArgs(args);
}

// The usage error's message, or "OK".
std::string ErrorOf(std::vector<std::string> args) {
  absl::StatusOr<Invocation> inv = Parse(std::move(args));
  if (inv.ok()) return "OK";
  EXPECT_EQ(inv.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(inv.status().message());
}

TEST(CliArgsTest, LsTakesAPrefixAndJson) {
  auto inv = Parse({"ls", "a/", "--json"});
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->command, Command::kLs);
  EXPECT_THAT(inv->arguments, ElementsAre("a/"));
  EXPECT_TRUE(inv->json);
  EXPECT_EQ(inv->socket_path, "");
}

TEST(CliArgsTest, SocketBeforeOrAfterTheCommand) {
  for (const auto& args : std::vector<std::vector<std::string>>{{"--socket", "/s", "stat", "n"},
                                                                {"stat", "n", "--socket", "/s"},
                                                                {"stat", "--socket=/s", "n"}}) {
    auto inv = Parse(args);
    ASSERT_TRUE(inv.ok()) << inv.status();
    EXPECT_EQ(inv->command, Command::kStat);
    EXPECT_EQ(inv->socket_path, "/s");
    EXPECT_THAT(inv->arguments, ElementsAre("n"));
  }
}

TEST(CliArgsTest, PutFlags) {
  auto inv = Parse({"put", "n", "f.npy", "--replace", "--mutable", "--device", "cpu",
                    "--readers=uid:1, group:ml", "--readers", "*"});
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->command, Command::kPut);
  EXPECT_THAT(inv->arguments, ElementsAre("n", "f.npy"));
  EXPECT_TRUE(inv->replace);
  EXPECT_TRUE(inv->is_mutable);
  EXPECT_EQ(inv->device, "cpu");
  EXPECT_THAT(inv->readers, ElementsAre("uid:1", "group:ml", "*"));
}

TEST(CliArgsTest, PutReadsStandardInputFromDash) {
  auto inv = Parse({"put", "n", "-"});
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_THAT(inv->arguments, ElementsAre("n", "-"));
}

TEST(CliArgsTest, GetRmStats) {
  auto get = Parse({"get", "n", "out.npy"});
  ASSERT_TRUE(get.ok()) << get.status();
  EXPECT_EQ(get->command, Command::kGet);
  EXPECT_THAT(get->arguments, ElementsAre("n", "out.npy"));
  auto rm = Parse({"rm", "n"});
  ASSERT_TRUE(rm.ok()) << rm.status();
  EXPECT_EQ(rm->command, Command::kRm);
  auto stats = Parse({"stats", "--prometheus"});
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->command, Command::kStats);
  EXPECT_TRUE(stats->prometheus);
  EXPECT_FALSE(stats->json);
}

TEST(CliArgsTest, HealthTimeout) {
  auto inv = Parse({"health"});
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->timeout_seconds, 1.0);
  inv = Parse({"health", "--timeout=2.5"});
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->timeout_seconds, 2.5);
}

TEST(CliArgsTest, WatchAfterAndCount) {
  auto inv = Parse({"watch", "p/", "--json", "--after", "7", "--count=3"});
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->command, Command::kWatch);
  EXPECT_THAT(inv->arguments, ElementsAre("p/"));
  EXPECT_TRUE(inv->json);
  EXPECT_EQ(inv->after, 7u);
  EXPECT_EQ(inv->count, 3u);
  inv = Parse({"watch", ""});
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_FALSE(inv->after.has_value());
  EXPECT_EQ(inv->count, 0u);
}

TEST(CliArgsTest, HelpAndVersion) {
  auto inv = Parse({"--help"});
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_TRUE(inv->help);
  EXPECT_EQ(inv->command, Command::kNone);
  inv = Parse({"stat", "-h"});  // the command's help; its NAME may be missing
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_TRUE(inv->help);
  EXPECT_EQ(inv->command, Command::kStat);
  inv = Parse({"help", "ls"});
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->command, Command::kHelp);
  EXPECT_THAT(inv->arguments, ElementsAre("ls"));
  inv = Parse({"--version"});
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_TRUE(inv->version);
  EXPECT_EQ(HelpText(Command::kLs).rfind("Usage: tensorbroker [--socket PATH] ls", 0), 0u);
}

TEST(CliArgsTest, DashesEndOptions) {
  auto inv = Parse({"stat", "--", "--json"});
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_THAT(inv->arguments, ElementsAre("--json"));
  EXPECT_FALSE(inv->json);
}

TEST(CliArgsTest, CommandErrors) {
  EXPECT_EQ(ErrorOf({}), "no command given");
  EXPECT_EQ(ErrorOf({"frobnicate"}),
            "unknown command 'frobnicate' (commands: ls, stat, put, get, rm, stats, health, "
            "watch, help)");
  EXPECT_EQ(ErrorOf({"help", "nosuchcommand"}), "unknown command 'nosuchcommand'");
  EXPECT_EQ(ErrorOf({"stat"}),
            "missing argument for 'stat'; usage: tensorbroker stat NAME [--json]");
  EXPECT_EQ(ErrorOf({"ls", "a", "b"}),
            "too many arguments for 'ls'; usage: tensorbroker ls [PREFIX] [--json]");
  EXPECT_EQ(ErrorOf({"put", "a"}),
            "missing argument for 'put'; usage: tensorbroker put NAME FILE.npy [--replace] "
            "[--mutable] [--device DEV] [--readers LIST]");
}

TEST(CliArgsTest, UnknownFlags) {
  EXPECT_EQ(ErrorOf({"ls", "--foo"}), "unknown option '--foo' for 'ls'");
  EXPECT_EQ(ErrorOf({"stats", "--replace"}), "unknown option '--replace' for 'stats'");
  EXPECT_EQ(ErrorOf({"get", "a", "b.npy", "--json"}), "unknown option '--json' for 'get'");
  EXPECT_EQ(ErrorOf({"get", "a", "b.npy", "--device", "cpu"}),
            "unknown option '--device' for 'get'");
  EXPECT_EQ(ErrorOf({"stats", "--timeout", "1"}), "unknown option '--timeout' for 'stats'");
  EXPECT_EQ(ErrorOf({"ls", "--version"}), "unknown option '--version' for 'ls'");
  EXPECT_EQ(ErrorOf({"-x"}), "unknown option '-x'");
  EXPECT_EQ(ErrorOf({"ls", "--json=false"}), "--json takes no value, got '--json=false'");
}

TEST(CliArgsTest, MissingValues) {
  EXPECT_EQ(ErrorOf({"--socket"}), "--socket needs a PATH");
  EXPECT_EQ(ErrorOf({"health", "--timeout"}), "--timeout needs SECONDS");
  EXPECT_EQ(ErrorOf({"watch", "p", "--after"}), "--after needs a number");
  EXPECT_EQ(ErrorOf({"watch", "p", "--count"}), "--count needs a number");
  EXPECT_EQ(ErrorOf({"put", "a", "b.npy", "--device"}), "--device needs a value (cpu, cuda:N)");
  EXPECT_EQ(ErrorOf({"put", "a", "b.npy", "--readers"}),
            "--readers needs a list (uid:N, gid:N, user:NAME, group:NAME, peer:NAME, *)");
}

TEST(CliArgsTest, BadValues) {
  EXPECT_EQ(ErrorOf({"--socket=", "stats"}), "--socket PATH must not be empty");
  EXPECT_EQ(ErrorOf({"--socket", "a", "stats", "--socket", "b"}), "--socket given more than once");
  EXPECT_EQ(ErrorOf({"health", "--timeout", "0"}),
            "--timeout '0' is not a number of seconds in (0, 3600]");
  EXPECT_EQ(ErrorOf({"health", "--timeout=soon"}),
            "--timeout 'soon' is not a number of seconds in (0, 3600]");
  EXPECT_EQ(ErrorOf({"watch", "p", "--after", "-1"}), "--after '-1' is not a whole number >= 0");
  EXPECT_EQ(ErrorOf({"watch", "p", "--count", "x"}), "--count 'x' is not a whole number >= 0");
  EXPECT_EQ(ErrorOf({"put", "a", "b.npy", "--readers", ","}), "--readers is empty");
  EXPECT_EQ(ErrorOf({"stats", "--json", "--prometheus"}),
            "--json and --prometheus exclude each other");
  EXPECT_NE(ErrorOf({"put", "a", "b.npy", "--device", "tpu"}).find("--device"), std::string::npos);
  EXPECT_NE(ErrorOf({"put", "a", "b.npy", "--device", "tpu"}).find("tpu"), std::string::npos);
}

}  // namespace
}  // namespace tensorbroker::cli
