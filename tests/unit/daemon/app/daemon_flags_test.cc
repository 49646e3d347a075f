// tensorbrokerd's command line (daemon_options.h ParseCommandLine) over the key table
// (daemon/app/option_keys.h): every key is a flag, a config file key and a paragraph of --help, the
// flags keep their order (the last wins), and the usage errors are exact.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/app/config_file.h"
#include "daemon/app/daemon_options.h"
#include "daemon/app/option_keys.h"

namespace tensorbroker::daemon {
namespace {

absl::StatusOr<CommandLine> Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "tensorbrokerd");
  std::vector<const char*> argv;
  for (const std::string& arg : args) argv.push_back(arg.c_str());
  return ParseCommandLine(static_cast<int>(argv.size()), argv.data());
}

TEST(DaemonFlags, EveryKeyIsAFlagAConfigKeyAndInTheHelp) {
  const std::string usage = DaemonUsage();
  for (const OptionKey& key : OptionKeys()) {
    const std::string flag = absl::StrCat("--", key.key);
    auto command_line = Parse({flag, "v"});
    ASSERT_TRUE(command_line.ok()) << flag << ": " << command_line.status();
    ASSERT_EQ(command_line->flags.size(), 1u) << flag;
    EXPECT_EQ(command_line->flags[0].key, key.key);
    EXPECT_EQ(command_line->flags[0].value, "v");
    EXPECT_EQ(command_line->flags[0].origin, flag);
    EXPECT_NE(usage.find(absl::StrCat(flag, " ", key.value_name)), std::string::npos) << flag;
    auto file = ParseConfigText(absl::StrCat(key.key, " = v\n"), "f.conf");
    ASSERT_TRUE(file.ok()) << file.status();
    // A bad value names file:line and the key: the file's key reached the same entry.
    auto resolved = ResolveSettings(*file, 1 << 20);
    if (!resolved.ok()) {
      const std::string message(resolved.status().message());
      EXPECT_EQ(message.rfind(absl::StrCat("f.conf:1: ", key.key), 0), 0u) << message;
      EXPECT_EQ(message.find("unknown key"), std::string::npos) << message;
    }
  }
}

TEST(DaemonFlags, FlagsKeepTheirOrderAndTheLastWins) {
  auto command_line = Parse({"--capacity", "1G", "--log-level=debug", "--capacity=2G"});
  ASSERT_TRUE(command_line.ok()) << command_line.status();
  ASSERT_EQ(command_line->flags.size(), 3u);
  EXPECT_EQ(command_line->flags[0].value, "1G");
  EXPECT_EQ(command_line->flags[1].key, "log-level");
  EXPECT_EQ(command_line->flags[2].value, "2G");
  auto options = ResolveSettings(command_line->flags, 1 << 20);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->capacity_bytes, 2ull << 30);
}

TEST(DaemonFlags, AnEmptyValueIsAValue) {
  for (const auto& args :
       std::vector<std::vector<std::string>>{{"--metrics-listen", ""}, {"--metrics-listen="}}) {
    auto command_line = Parse(args);
    ASSERT_TRUE(command_line.ok()) << command_line.status();
    ASSERT_EQ(command_line->flags.size(), 1u);
    EXPECT_EQ(command_line->flags[0].value, "");
  }
}

TEST(DaemonFlags, Modes) {
  auto command_line = Parse({"--takeover", "-h", "--print-config"});
  ASSERT_TRUE(command_line.ok()) << command_line.status();
  EXPECT_TRUE(command_line->takeover);
  EXPECT_TRUE(command_line->help);
  EXPECT_TRUE(command_line->print_config);
  EXPECT_FALSE(command_line->config_given);
  EXPECT_EQ(command_line->config_path, kDefaultConfigPath);
  EXPECT_TRUE(command_line->flags.empty());
}

TEST(DaemonFlags, UsageErrors) {
  EXPECT_EQ(Parse({"--capacty", "4G"}).status().message(),
            "unknown argument '--capacty' (see --help)");
  EXPECT_EQ(Parse({"stray"}).status().message(), "unknown argument 'stray' (see --help)");
  EXPECT_EQ(Parse({"--readers[a]", "*"}).status().message(),
            "unknown argument '--readers[a]' (see --help)");
  EXPECT_EQ(Parse({"--watch-log"}).status().message(), "--watch-log needs a value");
  EXPECT_EQ(Parse({"--config"}).status().message(), "--config needs a value");
  EXPECT_EQ(Parse({"--config="}).status().message(), "--config is empty");
  EXPECT_EQ(Parse({"--takeover=yes"}).status().message(),
            "--takeover takes no value, got '--takeover=yes'");
  EXPECT_EQ(Parse({"--", "--takeover"}).status().message(), "unknown argument '--' (see --help)");
  auto bad = ResolveSettings(Parse({"--max-connections", "many"})->flags, 1 << 20);
  EXPECT_EQ(bad.status().message(),
            "--max-connections: 'many' is not a whole number from 0 to 1000000");
}

}  // namespace
}  // namespace tensorbroker::daemon
