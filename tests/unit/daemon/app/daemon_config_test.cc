// tensorbrokerd's settings: the config file's syntax, resolution of file and flags (flags win),
// errors that name the flag or file:line, and --print-config's output read back.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "daemon/app/config_file.h"
#include "daemon/app/daemon_options.h"
#include "daemon/net/listen_address.h"

namespace tensorbroker::daemon {
namespace {

constexpr uint64_t kDefaultCapacity = 1ull << 30;

TEST(ConfigFile, KeyValueLinesCommentsAndBlanks) {
  auto settings = ParseConfigText(
      "# tensorbrokerd\n\n  socket = /run/tb/b.sock  # trailing comment\ncapacity=4G\n"
      "log-level =debug\n",
      "t.conf");
  ASSERT_TRUE(settings.ok()) << settings.status();
  ASSERT_EQ(settings->size(), 3u);
  EXPECT_EQ((*settings)[0].key, "socket");
  EXPECT_EQ((*settings)[0].value, "/run/tb/b.sock");
  EXPECT_EQ((*settings)[0].origin, "t.conf:3");
  EXPECT_EQ((*settings)[1].value, "4G");
  EXPECT_EQ((*settings)[2].origin, "t.conf:5");
}

TEST(ConfigFile, MalformedLinesNameFileAndLine) {
  EXPECT_EQ(ParseConfigText("capacity 4G\n", "t.conf").status().message(),
            "t.conf:1: expected 'key = value', got 'capacity 4G'");
  EXPECT_EQ(ParseConfigText("\n= 4G\n", "t.conf").status().message(),
            "t.conf:2: no key before '='");
  EXPECT_EQ(ParseConfigText("capacity = 1G\ncapacity = 2G\n", "t.conf").status().message(),
            "t.conf:2: 'capacity' is set twice in this file");
  EXPECT_EQ(ReadConfigFile("/nonexistent/tb.conf").status().code(), absl::StatusCode::kNotFound);
}

TEST(ListenAddress, HostPortBracketedIpv6AndEveryInterface) {
  auto v4 = ParseListenAddress("127.0.0.1:9464");
  ASSERT_TRUE(v4.ok()) << v4.status();
  EXPECT_EQ(v4->host, "127.0.0.1");
  EXPECT_EQ(v4->port, 9464);
  auto v6 = ParseListenAddress("[::1]:0");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 0);
  auto any = ParseListenAddress(":65535");
  ASSERT_TRUE(any.ok()) << any.status();
  EXPECT_EQ(any->host, "");
  EXPECT_EQ(any->port, 65535);
}

TEST(ListenAddress, HostPortIsWhatGrpcListensOn) {
  EXPECT_EQ(HostPort(*ParseListenAddress("127.0.0.1:0"), 7070), "127.0.0.1:7070");
  EXPECT_EQ(HostPort(*ParseListenAddress("[::1]:1"), 7070), "[::1]:7070");
  EXPECT_EQ(HostPort(*ParseListenAddress(":7070"), 7070), "[::]:7070");
}

// The TLS files come together, and a peer listener needs them; the error names the setting
// that needs the others.
TEST(DaemonSettings, PeerListenerAndTlsFilesComeTogether) {
  auto alone = ResolveSettings({{"peer-listen", ":7070", "f.conf:3"}}, kDefaultCapacity);
  EXPECT_EQ(alone.status().message(),
            "f.conf:3: peer-listen: needs tls-cert, tls-key and tls-ca (mutual TLS; there is no "
            "plaintext TCP): tls-cert, tls-key, tls-ca are not set");
  auto partial = ResolveSettings(
      {{"tls-cert", "/a.crt", "f.conf:1"}, {"tls-ca", "/ca.crt", "--tls-ca"}}, kDefaultCapacity);
  EXPECT_EQ(partial.status().message(),
            "--tls-ca: needs tls-cert, tls-key and tls-ca (mutual TLS; there is no plaintext "
            "TCP): tls-key is not set");
  auto bad = ResolveSettings({{"peer-listen", "node-a:7070", "--peer-listen"}}, kDefaultCapacity);
  EXPECT_EQ(bad.status().message(),
            "--peer-listen 'node-a:7070': the host is not an IPv4 address (IPv6 goes in "
            "brackets, e.g. [::1]:9464)");
  auto whole = ResolveSettings({{"peer-listen", ":7070", "--peer-listen"},
                                {"tls-cert", "/a.crt", "--tls-cert"},
                                {"tls-key", "/a.key", "--tls-key"},
                                {"tls-ca", "/ca.crt", "--tls-ca"}},
                               kDefaultCapacity);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->peer_listen, ":7070");
  EXPECT_EQ(whole->tls.cert, "/a.crt");
  EXPECT_EQ(whole->tls.key, "/a.key");
  EXPECT_EQ(whole->tls.ca, "/ca.crt");
  auto remote_alone =
      ResolveSettings({{"remote[models/]", "node-a.example:7070", "f.conf:2"}}, kDefaultCapacity);
  EXPECT_EQ(remote_alone.status().message(),
            "f.conf:2: remote[models/]: needs tls-cert, tls-key and tls-ca (mutual TLS; there is "
            "no plaintext TCP): tls-cert, tls-key, tls-ca are not set");
  // TLS files without a listener are fine (a broker that only fetches from peers).
  auto files_only = ResolveSettings({{"tls-cert", "/a.crt", "--tls-cert"},
                                     {"tls-key", "/a.key", "--tls-key"},
                                     {"tls-ca", "/ca.crt", "--tls-ca"}},
                                    kDefaultCapacity);
  EXPECT_TRUE(files_only.ok()) << files_only.status();
}

TEST(DaemonSettings, RemotePrefixesParseAndPrintBack) {
  auto options = ResolveSettings({{"remote[models/]", "tensorbroker-peers.ns.svc:7070", "f:1"},
                                  {"remote[kv/]", "[fd00::2]:7070", "f:2"},
                                  {"tls-cert", "/a.crt", "f:3"},
                                  {"tls-key", "/a.key", "f:4"},
                                  {"tls-ca", "/ca.crt", "f:5"}},
                                 kDefaultCapacity);
  ASSERT_TRUE(options.ok()) << options.status();
  ASSERT_EQ(options->remote.size(), 2u);
  EXPECT_EQ(options->remote.at("models/").host, "tensorbroker-peers.ns.svc");
  EXPECT_EQ(options->remote.at("models/").port, 7070);
  EXPECT_TRUE(options->remote.at("kv/").numeric);
  const std::string printed = FormatConfig(*options);
  EXPECT_NE(printed.find("remote[kv/] = [fd00::2]:7070\nremote[models/] = "
                         "tensorbroker-peers.ns.svc:7070\n"),
            std::string::npos)
      << printed;
  auto bad = ResolveSettings({{"remote[models/]", "models:70000", "f.conf:7"}}, kDefaultCapacity);
  EXPECT_EQ(bad.status().message(),
            "f.conf:7: remote[models/] 'models:70000': the port is not a number from 1 to 65535");
  auto no_prefix = ResolveSettings({{"remote[]", "a:1", "f.conf:8"}}, kDefaultCapacity);
  EXPECT_EQ(no_prefix.status().message(), "f.conf:8: remote[]: the prefix is empty");
}

TEST(ListenAddress, MalformedAddressesNameTheFieldAndWhy) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "--metrics-listen '': is empty; give HOST:PORT, e.g. 127.0.0.1:9464"},
      {"9464", "--metrics-listen '9464': needs HOST:PORT (or :PORT for every interface)"},
      {"::1:9464",
       "--metrics-listen '::1:9464': an IPv6 address goes in brackets, e.g. [::1]:9464"},
      {"[::1]",
       "--metrics-listen '[::1]': an IPv6 address is written [ADDRESS]:PORT, e.g. [::1]:9464"},
      {"[]:80", "--metrics-listen '[]:80': the IPv6 address is empty"},
      {"1.2.3.4:", "--metrics-listen '1.2.3.4:': the port is not a number from 0 to 65535"},
      {":65536", "--metrics-listen ':65536': the port is not a number from 0 to 65535"},
      {"[::]:+80", "--metrics-listen '[::]:+80': the port is not a number from 0 to 65535"},
      {"localhost:80",
       "--metrics-listen 'localhost:80': the host is not an IPv4 address (IPv6 "
       "goes in brackets, e.g. [::1]:9464)"},
      {"1.2.3:80",
       "--metrics-listen '1.2.3:80': the host is not an IPv4 address (IPv6 goes in "
       "brackets, e.g. [::1]:9464)"},
      {"[localhost]:80", "--metrics-listen '[localhost]:80': the host is not an IPv6 address"},
  };
  for (const auto& [text, message] : cases) {
    auto parsed = ParseListenAddress(text);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_EQ(parsed.status().message(), message);
  }
  EXPECT_EQ(ParseListenAddress("x", "t.conf:3: metrics-listen").status().message(),
            "t.conf:3: metrics-listen 'x': needs HOST:PORT (or :PORT for every interface)");
}

TEST(DaemonSettings, UnknownKeysAndBadValuesNameWhereTheyCameFrom) {
  auto unknown = ResolveSettings({{"capacty", "4G", "f.conf:2"}}, kDefaultCapacity);
  EXPECT_EQ(unknown.status().message(),
            "f.conf:2: unknown key 'capacty' (keys: socket, capacity, cuda-capacity, "
            "cuda-handles, log-level, metrics-listen, peer-listen, tls-cert, tls-key, tls-ca, "
            "admin-group, default-readers, quota-bytes, quota-tensors, "
            "pending-timeout, handshake-timeout, max-connections, max-lease-tables-per-uid, "
            "fetch-stall-timeout, watch-log, readers[PREFIX], "
            "publishers[PREFIX], quota-bytes[USER], quota-tensors[USER], remote[PREFIX])");
  auto bad_size = ResolveSettings({{"capacity", "lots", "f.conf:1"}}, kDefaultCapacity);
  EXPECT_EQ(bad_size.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad_size.status().message().substr(0, 19), "f.conf:1: capacity ");
  auto zero = ResolveSettings({{"capacity", "0", "--capacity"}}, kDefaultCapacity);
  EXPECT_EQ(zero.status().message(), "--capacity must be more than 0");
  auto level = ResolveSettings({{"log-level", "loud", "f.conf:4"}}, kDefaultCapacity);
  EXPECT_EQ(level.status().message(),
            "f.conf:4: log-level 'loud' is not one of error, warning, notice, info, debug");
  auto handles = ResolveSettings({{"cuda-handles", "fd", "--cuda-handles"}}, kDefaultCapacity);
  EXPECT_EQ(handles.status().message(), "--cuda-handles 'fd' is not one of ipc, vmm");
}

TEST(DaemonSettings, CommandLineFlagsAndModes) {
  const char* argv[] = {"tensorbrokerd", "--capacity=2G", "--log-level",   "debug",
                        "--config",      "/x.conf",       "--print-config"};
  auto command_line = ParseCommandLine(7, argv);
  ASSERT_TRUE(command_line.ok()) << command_line.status();
  EXPECT_TRUE(command_line->print_config);
  EXPECT_TRUE(command_line->config_given);
  EXPECT_EQ(command_line->config_path, "/x.conf");
  ASSERT_EQ(command_line->flags.size(), 2u);
  EXPECT_EQ(command_line->flags[0].key, "capacity");
  EXPECT_EQ(command_line->flags[0].origin, "--capacity");
  const char* unknown[] = {"tensorbrokerd", "--capacty", "4G"};
  EXPECT_EQ(ParseCommandLine(3, unknown).status().message(),
            "unknown argument '--capacty' (see --help)");
  const char* missing[] = {"tensorbrokerd", "--socket"};
  EXPECT_EQ(ParseCommandLine(2, missing).status().message(), "--socket needs a value");
}

class ConfigFileOnDisk : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/tbconf.XXXXXX";
    dir_ = ::mkdtemp(dir);
    path_ = dir_ + "/tensorbrokerd.conf";
  }
  void TearDown() override {
    std::remove(path_.c_str());
    ::rmdir(dir_.c_str());
  }
  void Write(const std::string& text) { std::ofstream(path_) << text; }
  std::string dir_, path_;
};

TEST_F(ConfigFileOnDisk, FlagsOverrideTheFileAndPrintConfigReadsBack) {
  Write(
      "socket = /tmp/from-file.sock\ncapacity = 64M\nlog-level = warning\n"
      "metrics-listen = [::1]:9464\n");
  const std::string config_flag = "--config=" + path_;
  const char* argv[] = {"tensorbrokerd",   config_flag.c_str(),
                        "--log-level",     "debug",
                        "--cuda-capacity", "1G",
                        "--cuda-handles",  "vmm"};
  auto command_line = ParseCommandLine(8, argv);
  ASSERT_TRUE(command_line.ok()) << command_line.status();
  auto options = LoadDaemonOptions(*command_line, kDefaultCapacity);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->socket_path, "/tmp/from-file.sock");
  EXPECT_EQ(options->capacity_bytes, 64ull << 20);
  EXPECT_EQ(options->log_level, LogLevel::kDebug);  // the flag wins
  EXPECT_EQ(options->cuda_capacity_bytes, std::optional<uint64_t>(1ull << 30));
  EXPECT_EQ(options->cuda_handles, CudaHandles::kVmm);
  EXPECT_EQ(options->metrics_listen, "[::1]:9464");
  EXPECT_EQ(options->config_path, path_);
  const std::string printed = FormatConfig(*options);
  EXPECT_EQ(printed, "# tensorbrokerd's effective configuration (config file: " + path_ +
                         ")\nsocket = /tmp/from-file.sock\ncapacity = 67108864  # 64.0 MiB\n"
                         "cuda-capacity = 1073741824  # 1.0 GiB per GPU\ncuda-handles = vmm\n"
                         "log-level = debug\n"
                         "metrics-listen = [::1]:9464\n# peer-listen: not set: no peers (no TCP)\n"
                         "# tls-cert: not set: none\n# tls-key: not set: none\n"
                         "# tls-ca: not set: none\n# admin-group: not set: root only\n"
                         "default-readers = *\nquota-bytes = 0  # unlimited\n"
                         "quota-tensors = 0  # unlimited\npending-timeout = 1m\n"
                         "handshake-timeout = 10s\nmax-connections = 4096\n"
                         "max-lease-tables-per-uid = 64\nfetch-stall-timeout = 10s\n"
                         "watch-log = 16384\n");
  // What --print-config prints is a config file that means the same.
  auto again = ParseConfigText(printed, "printed");
  ASSERT_TRUE(again.ok()) << again.status();
  auto same = ResolveSettings(*again, kDefaultCapacity);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->socket_path, options->socket_path);
  EXPECT_EQ(same->capacity_bytes, options->capacity_bytes);
  EXPECT_EQ(same->cuda_capacity_bytes, options->cuda_capacity_bytes);
  EXPECT_EQ(same->cuda_handles, options->cuda_handles);
  EXPECT_EQ(same->log_level, options->log_level);
}

TEST_F(ConfigFileOnDisk, TenancySettingsParseAndPrintBack) {
  Write(
      "admin-group = root\ndefault-readers = uid:0, gid:0\nquota-bytes = 1G\n"
      "quota-tensors = 100\npending-timeout = 1500ms\nhandshake-timeout = 3\n"
      "max-connections = 64\nreaders[team/] = uid:1000,user:root\n"
      "publishers[team/] = group:root\nquota-bytes[root] = 2G\n"
      "quota-tensors[uid:1000] = 7\n");
  CommandLine command_line;
  command_line.config_path = path_;
  command_line.config_given = true;
  auto options = LoadDaemonOptions(command_line, kDefaultCapacity);
  ASSERT_TRUE(options.ok()) << options.status();
  const AccessConfig& access = options->access;
  EXPECT_EQ(access.admin_gid, std::optional<uint32_t>(0));
  EXPECT_EQ(access.default_readers.Entries(), (std::vector<std::string>{"uid:0", "gid:0"}));
  EXPECT_EQ(access.default_quota.bytes, 1ull << 30);
  EXPECT_EQ(access.default_quota.tensors, 100u);
  EXPECT_EQ(options->pending_timeout, absl::Milliseconds(1500));
  EXPECT_EQ(options->handshake_timeout, absl::Seconds(3));
  EXPECT_EQ(options->max_connections, 64u);
  ASSERT_EQ(access.prefix_rules.count("team/"), 1u);
  EXPECT_EQ(access.prefix_rules.at("team/").readers->Entries(),
            (std::vector<std::string>{"uid:0", "uid:1000"}));
  EXPECT_EQ(access.prefix_rules.at("team/").publishers->Entries(),
            (std::vector<std::string>{"gid:0"}));
  const AccessPolicy policy(access);
  EXPECT_EQ(policy.QuotaFor(0).bytes, 2ull << 30);
  EXPECT_EQ(policy.QuotaFor(0).tensors, 100u);
  EXPECT_EQ(policy.QuotaFor(1000).bytes, 1ull << 30);
  EXPECT_EQ(policy.QuotaFor(1000).tensors, 7u);
  // What --print-config prints reads back to the same settings.
  auto again = ParseConfigText(FormatConfig(*options), "printed");
  ASSERT_TRUE(again.ok()) << again.status();
  auto same = ResolveSettings(*again, kDefaultCapacity);
  ASSERT_TRUE(same.ok()) << same.status();
  same->config_path = options->config_path;
  EXPECT_EQ(FormatConfig(*same), FormatConfig(*options));
}

TEST_F(ConfigFileOnDisk, BadTenancySettingsNameTheKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"quota-bytes[nosuchuser] = 1G", ": quota-bytes[nosuchuser][0]: no user named 'nosuchuser'"},
      {"readers[team/] = bogus",
       ": readers[team/][0]: 'bogus' is not uid:N, gid:N, user:NAME, group:NAME, peer:NAME or *"},
      {"readers[] = *", ": readers[]: the prefix is empty"},
      {"pending-timeout = soon",
       ": pending-timeout: 'soon' is not a duration (e.g. 60s, 1m30s, 500ms)"},
      {"max-connections = 0", ": max-connections must be more than 0"},
      {"admin-group = nosuchgroup", ": admin-group[0]: no group named 'nosuchgroup'"},
  };
  for (const auto& [line, message] : cases) {
    Write(line + "\n");
    CommandLine command_line;
    command_line.config_path = path_;
    command_line.config_given = true;
    auto options = LoadDaemonOptions(command_line, kDefaultCapacity);
    EXPECT_EQ(options.status().message(), path_ + ":1" + message) << line;
  }
}

TEST_F(ConfigFileOnDisk, AnAbsentDefaultFileIsFineAnAbsentExplicitOneIsNot) {
  CommandLine defaults;
  defaults.config_path = path_;  // does not exist; not given with --config
  auto options = LoadDaemonOptions(defaults, kDefaultCapacity);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->config_path, "");
  EXPECT_EQ(options->capacity_bytes, kDefaultCapacity);
  defaults.config_given = true;
  EXPECT_EQ(LoadDaemonOptions(defaults, kDefaultCapacity).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tensorbroker::daemon
