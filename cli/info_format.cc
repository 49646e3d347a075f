#include "cli/info_format.h"

#include <time.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/byte_size.h"
#include "common/stats_schema.h"
#include "tensorbroker/dtype_names.h"

namespace tensorbroker::cli {
namespace {

std::string ShapeText(const std::vector<int64_t>& dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

std::string TimeText(int64_t unix_ms) {
  if (unix_ms <= 0) return "-";
  const time_t seconds = static_cast<time_t>(unix_ms / 1000);
  struct tm tm {};
  if (gmtime_r(&seconds, &tm) == nullptr) return absl::StrCat(unix_ms, " ms");
  char text[64];
  if (strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%S", &tm) == 0) {
    return absl::StrCat(unix_ms, " ms");
  }
  return absl::StrCat(text, ".", absl::Dec(unix_ms % 1000, absl::kZeroPad3), "Z");
}

std::string KeyValueLines(const std::vector<std::pair<std::string, std::string>>& rows) {
  size_t width = 0;
  for (const auto& [key, value] : rows) width = std::max(width, key.size());
  std::string out;
  for (const auto& [key, value] : rows) {
    absl::StrAppend(&out, key, ":", std::string(width - key.size() + 1, ' '), value, "\n");
  }
  return out;
}

// WalkStats' output as members of the JSON object open in `json`.
struct JsonStatsOut {
  JsonWriter& json;
  void Number(const char* key, uint64_t value) { json.Key(key).UInt(value); }
  void String(const char* key, const std::string& value) { json.Key(key).String(value); }
  void BeginList(const char* key) { json.Key(key).BeginArray(); }
  void BeginItem() { json.BeginObject(); }
  void EndItem() { json.EndObject(); }
  void EndList() { json.EndArray(); }
};

}  // namespace

void WriteTensorInfoJson(const TensorInfo& info, JsonWriter& json) {
  json.BeginObject();
  json.Key("name").String(info.name);
  json.Key("dtype").String(DTypeName(info.dtype));
  json.Key("shape").IntArray(info.shape);
  json.Key("strides").IntArray(info.strides);
  json.Key("nbytes").UInt(info.nbytes);
  json.Key("device").String(DeviceName(info.device));
  json.Key("sealed").Bool(info.sealed);
  json.Key("mutable").Bool(info.is_mutable);
  json.Key("version").UInt(info.version);
  json.Key("leases").UInt(info.leases);
  json.Key("created_unix_ms").Int(info.created_unix_ms);
  json.Key("owner_uid").UInt(info.owner_uid);
  json.Key("readers").BeginArray();
  for (const std::string& reader : info.readers) json.String(reader);
  json.EndArray();
  json.Key("keep").UInt(info.keep);
  json.Key("kept_versions").BeginArray();
  for (uint64_t version : info.kept_versions) json.UInt(version);
  json.EndArray();
  json.Key("ephemeral").Bool(info.ephemeral);
  json.Key("origin");
  if (info.origin.has_value()) {
    json.BeginObject();
    json.Key("peer").String(info.origin->peer);
    json.Key("version").UInt(info.origin->version);
    json.Key("fetched_unix_ms").Int(info.origin->fetched_unix_ms);
    json.EndObject();
  } else {
    json.Null();
  }
  json.EndObject();
}

std::string TensorInfoJson(const TensorInfo& info) {
  JsonWriter json;
  WriteTensorInfoJson(info, json);
  return json.str();
}

std::string TensorListJson(const std::vector<TensorInfo>& infos) {
  JsonWriter json;
  json.BeginArray();
  for (const TensorInfo& info : infos) WriteTensorInfoJson(info, json);
  json.EndArray();
  return json.str();
}

std::string StatsJson(const BrokerStats& stats) {
  JsonWriter json;
  json.BeginObject();
  JsonStatsOut out{json};
  WalkStats(stats, out);
  json.EndObject();
  return json.str();
}

std::string WatchEventText(const WatchEvent& event) {
  if (event.kind == WatchEvent::Kind::kLost) {
    return absl::StrCat(event.sequence, " lost ", event.lost_first, "..", event.lost_last);
  }
  return absl::StrCat(event.sequence, " ", WatchEventKindName(event.kind), " ", event.name, " v",
                      event.version, " ", DTypeName(event.info.dtype), ShapeText(event.info.shape),
                      " ", FormatByteSize(event.info.nbytes));
}

std::string WatchEventJson(const WatchEvent& event) {
  JsonWriter json;
  json.BeginObject();
  json.Key("kind").String(WatchEventKindName(event.kind));
  json.Key("sequence").UInt(event.sequence);
  if (event.kind == WatchEvent::Kind::kLost) {
    json.Key("lost_first").UInt(event.lost_first);
    json.Key("lost_last").UInt(event.lost_last);
  } else {
    json.Key("name").String(event.name);
    json.Key("version").UInt(event.version);
    if (event.kind == WatchEvent::Kind::kReplaced) {
      json.Key("previous_version").UInt(event.previous_version);
    }
    json.Key("tensor");
    WriteTensorInfoJson(event.info, json);
  }
  json.EndObject();
  return json.str();
}

std::string TensorInfoText(const TensorInfo& info) {
  return KeyValueLines({
      {"name", info.name},
      {"dtype", DTypeName(info.dtype)},
      {"shape", ShapeText(info.shape)},
      {"strides", ShapeText(info.strides)},
      {"nbytes", absl::StrCat(info.nbytes, " (", FormatByteSize(info.nbytes), ")")},
      {"device", DeviceName(info.device)},
      {"sealed", info.sealed ? "true" : "false"},
      {"mutable", info.is_mutable ? "true" : "false"},
      {"version", absl::StrCat(info.version)},
      {"leases", absl::StrCat(info.leases)},
      {"created", TimeText(info.created_unix_ms)},
      {"owner", absl::StrCat("uid ", info.owner_uid)},
      {"readers", absl::StrJoin(info.readers, ",")},
      {"keep", absl::StrCat(info.keep)},
      {"kept", absl::StrJoin(info.kept_versions, " ")},
      {"ephemeral", info.ephemeral ? "true" : "false"},
      {"origin", info.origin.has_value()
                     ? absl::StrCat("peer ", info.origin->peer, ", version ", info.origin->version,
                                    ", fetched ", TimeText(info.origin->fetched_unix_ms))
                     : std::string("this broker")},
  });
}

std::string TensorTableText(const std::vector<TensorInfo>& infos) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"NAME", "DTYPE", "SHAPE", "SIZE", "VERSION", "LEASES"});
  for (const TensorInfo& info : infos) {
    rows.push_back({info.name, DTypeName(info.dtype), ShapeText(info.shape),
                    FormatByteSize(info.nbytes), absl::StrCat(info.version),
                    absl::StrCat(info.leases)});
  }
  std::vector<size_t> widths(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      if (i + 1 == row.size()) {
        line += row[i];
      } else {
        absl::StrAppend(&line, row[i], std::string(widths[i] - row[i].size() + 2, ' '));
      }
    }
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

std::string StatsText(const BrokerStats& stats) {
  std::vector<std::pair<std::string, std::string>> lines;
  for (const auto& row : kBrokerStatsFields) {
    const uint64_t value = stats.*row.member;
    lines.emplace_back(row.label,
                       row.unit == StatsUnit::kBytes ? FormatByteSize(value) : absl::StrCat(value));
  }
  // Device pools beyond the CPU one (whose figures are the lines above).
  for (size_t i = 1; i < stats.pools.size(); ++i) {
    const PoolUsage& pool = stats.pools[i];
    lines.push_back(
        {DeviceName(pool.device),
         absl::StrCat(FormatByteSize(pool.used_bytes), " used of ",
                      FormatByteSize(pool.capacity_bytes), ", ",
                      FormatByteSize(pool.reserved_bytes), " in ", pool.segments, " slab(s)",
                      pool.handles.empty() ? "" : absl::StrCat(" (", pool.handles, ")"))});
  }
  // What each user holds: "user alice (uid 1000)": "3 MiB in 2 tensor(s); quota 1 GiB, 100".
  for (const UserUsage& user : stats.users) {
    const std::string who = user.user.empty()
                                ? absl::StrCat("user uid ", user.uid)
                                : absl::StrCat("user ", user.user, " (uid ", user.uid, ")");
    lines.push_back(
        {who,
         absl::StrCat(
             FormatByteSize(user.bytes), " in ", user.tensors, " tensor(s); quota ",
             user.quota_bytes == 0 ? std::string("unlimited") : FormatByteSize(user.quota_bytes),
             ", ",
             user.quota_tensors == 0 ? std::string("unlimited") : absl::StrCat(user.quota_tensors),
             " tensor(s)")});
  }
  // What each peer did: "peer broker-b": "12 call(s), 3.0 MiB sent".
  for (const PeerUsage& peer : stats.peers) {
    lines.push_back(
        {absl::StrCat("peer ", peer.peer),
         absl::StrCat(peer.calls, " call(s), ", FormatByteSize(peer.sent_bytes), " sent")});
  }
  // What was fetched from each remote[] address: "remote node-a:7070": "2 replica(s), 3.0 MiB;
  // 5 fetch(es), 7.5 MiB fetched, 1 failed; 0 evicted".
  for (const RemoteUsage& remote : stats.remotes) {
    lines.push_back(
        {absl::StrCat("remote ", remote.peer),
         absl::StrCat(remote.replicas, " replica(s), ", FormatByteSize(remote.replica_bytes), "; ",
                      remote.fetches, " fetch(es), ", FormatByteSize(remote.fetched_bytes),
                      " fetched, ", remote.fetch_failures, " failed; ", remote.evictions,
                      " evicted")});
  }
  return KeyValueLines(lines);
}

}  // namespace tensorbroker::cli
