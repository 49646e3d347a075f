// The stats schema (common/stats_schema.h) drives every output: each row shows in the Prometheus
// text, the CLI's JSON and text, the walk the Python dict is built from, and the proto messages
// (a uint64 field of the row's key, and no uint64 field without a row, written by the daemon and
// read back by the client).
#include "common/stats_schema.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/info_format.h"
#include "common/byte_size.h"
#include "common/prometheus_format.h"
#include "common/wire/proto_convert.h"
#include "daemon/metrics/peer_traffic.h"
#include "daemon/wire/store_proto.h"
#include "google/protobuf/descriptor.h"

namespace tensorbroker {
namespace {

// Every counter a different value: 1000 + its row's index (pools 2000 + ..., users 3000 + ...,
// peers 4000 + ..., remotes 5000 + ...).
BrokerStats Sample() {
  BrokerStats stats;
  uint64_t value = 1000;
  for (const auto& row : kBrokerStatsFields) stats.*row.member = value++;
  PoolUsage cpu;
  cpu.device = DLDevice{kDLCPU, 0};
  PoolUsage gpu;
  gpu.device = DLDevice{kDLCUDA, 1};
  value = 2000;
  for (const auto& row : kPoolStatsFields) {
    cpu.*row.member = value;
    gpu.*row.member = value++ + 500;
  }
  cpu.handles = "memfd";
  gpu.handles = "cuda-vmm";
  stats.pools = {cpu, gpu};
  UserUsage alice{1000, "alice"};
  value = 3000;
  for (const auto& row : kUserStatsFields) alice.*row.member = value++;
  stats.users = {alice};
  PeerUsage peer;
  peer.peer = "broker-b";
  value = 4000;
  for (const auto& row : kPeerStatsFields) peer.*row.member = value++;
  stats.peers = {peer};
  RemoteUsage remote;
  remote.peer = "node-a:7070";
  value = 5000;
  for (const auto& row : kRemoteStatsFields) remote.*row.member = value++;
  stats.remotes = {remote};
  return stats;
}

std::string Header(const char* name, const char* help) {
  return absl::StrCat("# HELP ", name, " ", help, "\n# TYPE ", name, " gauge\n");
}

TEST(StatsSchema, EveryRowInPrometheus) {
  const BrokerStats stats = Sample();
  const std::string text = PrometheusText(stats);
  for (const auto& row : kBrokerStatsFields) {
    if (row.prometheus == nullptr) {  // the CPU pool's figure: exported per pool
      bool per_pool = false;
      for (const auto& pool_row : kPoolStatsFields)
        per_pool |= std::string(pool_row.key) == row.key;
      EXPECT_TRUE(per_pool) << row.key;
      continue;
    }
    EXPECT_NE(text.find(absl::StrCat(Header(row.prometheus, row.help), row.prometheus, " ",
                                     stats.*row.member, "\n")),
              std::string::npos)
        << row.key;
  }
  EXPECT_NE(text.find("tensorbroker_pool_info{device=\"cpu\",handles=\"memfd\"} 1\n"
                      "tensorbroker_pool_info{device=\"cuda:1\",handles=\"cuda-vmm\"} 1\n"),
            std::string::npos)
      << text;
  for (const auto& row : kPoolStatsFields) {
    EXPECT_NE(text.find(absl::StrCat(Header(row.prometheus, row.help), row.prometheus,
                                     "{device=\"cpu\"} ", stats.pools[0].*row.member, "\n",
                                     row.prometheus, "{device=\"cuda:1\"} ",
                                     stats.pools[1].*row.member, "\n")),
              std::string::npos)
        << row.key;
  }
  for (const auto& row : kUserStatsFields) {
    EXPECT_NE(
        text.find(absl::StrCat(Header(row.prometheus, row.help), row.prometheus,
                               "{uid=\"1000\",user=\"alice\"} ", stats.users[0].*row.member, "\n")),
        std::string::npos)
        << row.key;
  }
  for (const auto& row : kPeerStatsFields) {
    EXPECT_NE(text.find(absl::StrCat("# HELP ", row.prometheus, " ", row.help, "\n# TYPE ",
                                     row.prometheus, " counter\n", row.prometheus,
                                     "{peer=\"broker-b\"} ", stats.peers[0].*row.member, "\n")),
              std::string::npos)
        << row.key;
  }
  for (const auto& row : kRemoteStatsFields) {
    const bool counter = absl::EndsWith(row.prometheus, "_total");
    EXPECT_NE(
        text.find(absl::StrCat("# HELP ", row.prometheus, " ", row.help, "\n# TYPE ",
                               row.prometheus, counter ? " counter\n" : " gauge\n", row.prometheus,
                               "{peer=\"node-a:7070\"} ", stats.remotes[0].*row.member, "\n")),
        std::string::npos)
        << row.key;
  }
}

// The JSON object, written out from the table: the CLI's must be exactly this.
TEST(StatsSchema, EveryRowInCliJson) {
  const BrokerStats stats = Sample();
  std::string expected = "{";
  for (const auto& row : kBrokerStatsFields) {
    absl::StrAppend(&expected, "\"", row.key, "\": ", stats.*row.member, ", ");
  }
  absl::StrAppend(&expected, "\"pools\": [");
  for (const PoolUsage& pool : stats.pools) {
    absl::StrAppend(&expected, &pool == &stats.pools[0] ? "" : ", ", "{\"device\": \"",
                    DeviceName(pool.device), "\", \"handles\": \"", pool.handles, "\"");
    for (const auto& row : kPoolStatsFields) {
      absl::StrAppend(&expected, ", \"", row.key, "\": ", pool.*row.member);
    }
    absl::StrAppend(&expected, "}");
  }
  absl::StrAppend(&expected, "], \"users\": [{\"uid\": 1000, \"user\": \"alice\"");
  for (const auto& row : kUserStatsFields) {
    absl::StrAppend(&expected, ", \"", row.key, "\": ", stats.users[0].*row.member);
  }
  absl::StrAppend(&expected, "}], \"peers\": [{\"peer\": \"broker-b\"");
  for (const auto& row : kPeerStatsFields) {
    absl::StrAppend(&expected, ", \"", row.key, "\": ", stats.peers[0].*row.member);
  }
  absl::StrAppend(&expected, "}], \"remotes\": [{\"peer\": \"node-a:7070\"");
  for (const auto& row : kRemoteStatsFields) {
    absl::StrAppend(&expected, ", \"", row.key, "\": ", stats.remotes[0].*row.member);
  }
  absl::StrAppend(&expected, "}]}");
  EXPECT_EQ(cli::StatsJson(stats), expected);
}

// A "label: value" line per row, first and in the table's order (values aligned past the
// longest label of every line).
TEST(StatsSchema, EveryRowInCliText) {
  const BrokerStats stats = Sample();
  const std::vector<std::string> lines = absl::StrSplit(cli::StatsText(stats), '\n');
  ASSERT_GE(lines.size(), std::size(kBrokerStatsFields));
  for (size_t i = 0; i < std::size(kBrokerStatsFields); ++i) {
    const auto& row = kBrokerStatsFields[i];
    const uint64_t value = stats.*row.member;
    const std::string label = absl::StrCat(row.label, ":");
    ASSERT_EQ(lines[i].substr(0, label.size()), label) << row.key;
    EXPECT_EQ(absl::StripLeadingAsciiWhitespace(lines[i].substr(label.size())),
              row.unit == StatsUnit::kBytes ? FormatByteSize(value) : absl::StrCat(value))
        << row.key;
  }
}

// What the Python dict (python/src/py_client.cc) is built from: WalkStats' keys.
struct KeyRecorder {
  std::vector<std::string> keys;
  void Number(const char* key, uint64_t) { keys.push_back(key); }
  void String(const char* key, const std::string&) { keys.push_back(key); }
  void BeginList(const char* key) { keys.push_back(absl::StrCat(key, "[")); }
  void BeginItem() {}
  void EndItem() {}
  void EndList() { keys.push_back("]"); }
};

TEST(StatsSchema, EveryRowInTheWalk) {
  KeyRecorder recorder;
  WalkStats(Sample(), recorder);
  std::vector<std::string> expected;
  for (const auto& row : kBrokerStatsFields) expected.push_back(row.key);
  expected.push_back("pools[");
  for (int pool = 0; pool < 2; ++pool) {
    expected.push_back("device");
    expected.push_back("handles");
    for (const auto& row : kPoolStatsFields) expected.push_back(row.key);
  }
  expected.insert(expected.end(), {"]", "users[", "uid", "user"});
  for (const auto& row : kUserStatsFields) expected.push_back(row.key);
  expected.insert(expected.end(), {"]", "peers[", "peer"});
  for (const auto& row : kPeerStatsFields) expected.push_back(row.key);
  expected.insert(expected.end(), {"]", "remotes[", "peer"});
  for (const auto& row : kRemoteStatsFields) expected.push_back(row.key);
  expected.push_back("]");
  EXPECT_EQ(recorder.keys, expected);
}

// Every row has a uint64 field of its key, and every (non-repeated) uint64 field has a row.
template <typename Struct, size_t N>
void ExpectSameCounters(const StatsField<Struct> (&rows)[N],
                        const google::protobuf::Descriptor* message) {
  std::vector<std::string> fields;
  for (int i = 0; i < message->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* field = message->field(i);
    if (!field->is_repeated() &&
        field->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_UINT64) {
      fields.push_back(field->name());
    }
  }
  std::vector<std::string> keys;
  for (const auto& row : rows) keys.push_back(row.key);
  std::sort(fields.begin(), fields.end());
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, fields) << message->full_name();
}

TEST(StatsSchema, EveryRowAProtoField) {
  ExpectSameCounters(kBrokerStatsFields, v1::BrokerStats::descriptor());
  ExpectSameCounters(kPoolStatsFields, v1::PoolStats::descriptor());
  ExpectSameCounters(kUserStatsFields, v1::UserUsage::descriptor());
  ExpectSameCounters(kPeerStatsFields, v1::PeerUsage::descriptor());
  ExpectSameCounters(kRemoteStatsFields, v1::RemoteUsage::descriptor());
}

// Sample() as the daemon's StoreStats (daemon/store/store_types.h), through the same rows.
daemon::StoreStats StoreSample() {
  const BrokerStats sample = Sample();
  daemon::StoreStats stats;
  for (size_t i = 0; i < std::size(kBrokerStatsFields); ++i) {
    stats.*kBrokerStatsRows<daemon::StoreStats>[i].member = sample.*kBrokerStatsFields[i].member;
  }
  for (const PoolUsage& usage : sample.pools) {
    daemon::StoreStats::Pool pool;
    pool.device = usage.device;
    pool.handles = usage.handles;
    for (size_t i = 0; i < std::size(kPoolStatsFields); ++i) {
      pool.*kPoolStatsRows<daemon::StoreStats::Pool>[i].member = usage.*kPoolStatsFields[i].member;
    }
    stats.pools.push_back(pool);
  }
  for (const UserUsage& usage : sample.users) {
    daemon::StoreStats::User user{usage.uid, usage.user};
    for (size_t i = 0; i < std::size(kUserStatsFields); ++i) {
      user.*kUserStatsRows<daemon::StoreStats::User>[i].member = usage.*kUserStatsFields[i].member;
    }
    stats.users.push_back(user);
  }
  for (const RemoteUsage& usage : sample.remotes) {
    daemon::StoreStats::Remote remote;
    remote.peer = usage.peer;
    for (size_t i = 0; i < std::size(kRemoteStatsFields); ++i) {
      remote.*kRemoteStatsRows<daemon::StoreStats::Remote>[i].member =
          usage.*kRemoteStatsFields[i].member;
    }
    stats.remotes.push_back(remote);
  }
  return stats;
}

// The daemon writes the counters (daemon/wire/store_proto.h), the client reads them back.
TEST(StatsSchema, ProtoRoundTrip) {
  const BrokerStats stats = Sample();
  v1::BrokerStats proto;
  daemon::ToProto(StoreSample(), &proto);
  EXPECT_EQ(proto.tensors(), stats.tensors);
  EXPECT_EQ(proto.pools(1).segments(), stats.pools[1].segments);
  EXPECT_EQ(proto.users(0).quota_tensors(), stats.users[0].quota_tensors);
  const BrokerStats back = FromProto(proto);
  for (const auto& row : kBrokerStatsFields) EXPECT_EQ(back.*row.member, stats.*row.member);
  ASSERT_EQ(back.pools.size(), 2u);
  EXPECT_EQ(DeviceName(back.pools[1].device), "cuda:1");
  EXPECT_EQ(back.pools[0].handles, "memfd");
  EXPECT_EQ(back.pools[1].handles, "cuda-vmm");
  for (const auto& row : kPoolStatsFields) {
    EXPECT_EQ(back.pools[1].*row.member, stats.pools[1].*row.member) << row.key;
  }
  ASSERT_EQ(back.users.size(), 1u);
  EXPECT_EQ(back.users[0].uid, 1000u);
  EXPECT_EQ(back.users[0].user, "alice");
  for (const auto& row : kUserStatsFields) {
    EXPECT_EQ(back.users[0].*row.member, stats.users[0].*row.member) << row.key;
  }
  ASSERT_EQ(back.remotes.size(), 1u);
  EXPECT_EQ(back.remotes[0].peer, "node-a:7070");
  for (const auto& row : kRemoteStatsFields) {
    EXPECT_EQ(back.remotes[0].*row.member, stats.remotes[0].*row.member) << row.key;
  }
  // The peers' rows: the front end's (PeerTrafficRow), through the same schema.
  v1::BrokerStats with_peer;
  daemon::PeerTrafficRow row{"broker-b", stats.peers[0].calls, stats.peers[0].sent_bytes};
  v1::PeerUsage* peer = with_peer.add_peers();
  peer->set_peer(row.peer);
  daemon::CountersToProto(kPeerStatsRows<daemon::PeerTrafficRow>, row, peer);
  const BrokerStats peers_back = FromProto(with_peer);
  ASSERT_EQ(peers_back.peers.size(), 1u);
  EXPECT_EQ(peers_back.peers[0].peer, "broker-b");
  for (const auto& field : kPeerStatsFields) {
    EXPECT_EQ(peers_back.peers[0].*field.member, stats.peers[0].*field.member) << field.key;
  }
}

}  // namespace
}  // namespace tensorbroker
