#include "daemon/app/option_keys.h"

#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "common/byte_size.h"
#include "common/socket_path.h"
#include "common/tensor_layout.h"
#include "daemon/app/daemon_options.h"
#include "daemon/net/listen_address.h"

namespace tensorbroker::daemon {
namespace {

// "60s", "1m30s", "500ms", or plain seconds; more than 0.
absl::StatusOr<absl::Duration> ParsePositiveDuration(const std::string& text,
                                                     const std::string& field) {
  absl::Duration duration;
  int64_t seconds = 0;
  if (absl::SimpleAtoi(text, &seconds)) {
    duration = absl::Seconds(seconds);
  } else if (!absl::ParseDuration(text, &duration)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": '", text.substr(0, 64),
                                                   "' is not a duration (e.g. 60s, 1m30s, 500ms)"));
  }
  if (duration <= absl::ZeroDuration() || duration == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(field, " must be more than 0 and finite"));
  }
  return duration;
}

absl::StatusOr<uint64_t> ParseCount(const std::string& text, const std::string& field,
                                    uint64_t most) {
  uint64_t count = 0;
  if (!absl::SimpleAtoi(text, &count) || count > most) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": '", text.substr(0, 64), "' is not a whole number from 0 to ", most));
  }
  return count;
}

// A count from 1 to `most`.
absl::StatusOr<uint64_t> ParsePositiveCount(const std::string& text, const std::string& field,
                                            uint64_t most) {
  auto count = ParseCount(text, field, most);
  if (count.ok() && *count == 0) return absl::InvalidArgumentError(field + " must be more than 0");
  return count;
}

// The uid a quota-bytes[USER] key names: a user name or uid:N.
absl::StatusOr<uint32_t> ParseUserArgument(const std::string& user, const std::string& field) {
  auto set = PrincipalSet::Parse(
      {absl::StartsWith(user, "uid:") ? user : absl::StrCat("user:", user)}, field);
  if (!set.ok()) return set.status();
  const std::vector<std::string> entries = set->Entries();
  uint32_t uid = 0;
  if (entries.size() != 1 || !absl::SimpleAtoi(absl::StripPrefix(entries[0], "uid:"), &uid)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": name one user (a user name or uid:N)"));
  }
  return uid;
}

// Sets *out to what `parsed` holds, or returns its error.
template <typename T, typename U>
absl::Status Store(absl::StatusOr<T> parsed, U* out) {
  if (!parsed.ok()) return parsed.status();
  *out = static_cast<U>(*std::move(parsed));
  return absl::OkStatus();
}

absl::Status ApplySocket(const std::string& value, const std::string& field, DaemonOptions* o) {
  if (value.empty()) return absl::InvalidArgumentError(field + " is empty");
  o->socket_path = value;
  return absl::OkStatus();
}

absl::Status ApplyCapacity(const std::string& value, const std::string& field, DaemonOptions* o) {
  auto bytes = ParseByteSize(value, field);
  if (bytes.ok() && *bytes == 0) return absl::InvalidArgumentError(field + " must be more than 0");
  return Store(bytes, &o->capacity_bytes);
}

absl::Status ApplyCudaCapacity(const std::string& value, const std::string& field,
                               DaemonOptions* o) {
  return Store(ParseByteSize(value, field), &o->cuda_capacity_bytes);
}

absl::Status ApplyCudaHandles(const std::string& value, const std::string& field,
                              DaemonOptions* o) {
  if (value == "vmm") {
    o->cuda_handles = CudaHandles::kVmm;
  } else if (value == "ipc") {
    o->cuda_handles = CudaHandles::kLegacyIpc;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(field, " '", value, "' is not one of ipc, vmm"));
  }
  return absl::OkStatus();
}

absl::Status ApplyLogLevel(const std::string& value, const std::string& field, DaemonOptions* o) {
  return Store(ParseLogLevel(value, field), &o->log_level);
}

absl::Status ApplyMetricsListen(const std::string& value, const std::string& field,
                                DaemonOptions* o) {
  if (!value.empty()) {  // empty: off, e.g. to override the file on the command line
    if (absl::Status s = ParseListenAddress(value, field).status(); !s.ok()) return s;
  }
  o->metrics_listen = value;
  return absl::OkStatus();
}

absl::Status ApplyPeerListen(const std::string& value, const std::string& field, DaemonOptions* o) {
  if (!value.empty()) {  // empty: off
    if (absl::Status s = ParseListenAddress(value, field).status(); !s.ok()) return s;
  }
  o->peer_listen = value;
  return absl::OkStatus();
}

absl::Status ApplyTlsCert(const std::string& value, const std::string&, DaemonOptions* o) {
  o->tls.cert = value;
  return absl::OkStatus();
}

absl::Status ApplyTlsKey(const std::string& value, const std::string&, DaemonOptions* o) {
  o->tls.key = value;
  return absl::OkStatus();
}

absl::Status ApplyTlsCa(const std::string& value, const std::string&, DaemonOptions* o) {
  o->tls.ca = value;
  return absl::OkStatus();
}

absl::Status ApplyAdminGroup(const std::string& value, const std::string& field, DaemonOptions* o) {
  o->admin_group = value;
  o->access.admin_gid.reset();
  if (value.empty()) return absl::OkStatus();  // none, e.g. to override the file
  auto set = PrincipalSet::Parse({absl::StrCat("group:", value)}, field);
  if (!set.ok()) return set.status();
  uint32_t gid = 0;
  (void)absl::SimpleAtoi(absl::StripPrefix(set->Entries()[0], "gid:"), &gid);
  o->access.admin_gid = gid;
  return absl::OkStatus();
}

absl::Status ApplyDefaultReaders(const std::string& value, const std::string& field,
                                 DaemonOptions* o) {
  return Store(PrincipalSet::ParseList(value, field), &o->access.default_readers);
}

absl::Status ApplyQuotaBytes(const std::string& value, const std::string& field, DaemonOptions* o) {
  return Store(ParseByteSize(value, field), &o->access.default_quota.bytes);
}

absl::Status ApplyQuotaTensors(const std::string& value, const std::string& field,
                               DaemonOptions* o) {
  return Store(ParseCount(value, field, UINT64_MAX), &o->access.default_quota.tensors);
}

absl::Status ApplyPendingTimeout(const std::string& value, const std::string& field,
                                 DaemonOptions* o) {
  return Store(ParsePositiveDuration(value, field), &o->pending_timeout);
}

absl::Status ApplyHandshakeTimeout(const std::string& value, const std::string& field,
                                   DaemonOptions* o) {
  return Store(ParsePositiveDuration(value, field), &o->handshake_timeout);
}

absl::Status ApplyFetchStallTimeout(const std::string& value, const std::string& field,
                                    DaemonOptions* o) {
  return Store(ParsePositiveDuration(value, field), &o->fetch_stall_timeout);
}

absl::Status ApplyMaxConnections(const std::string& value, const std::string& field,
                                 DaemonOptions* o) {
  return Store(ParsePositiveCount(value, field, 1000000), &o->max_connections);
}

absl::Status ApplyMaxLeaseTablesPerUid(const std::string& value, const std::string& field,
                                       DaemonOptions* o) {
  return Store(ParsePositiveCount(value, field, 100000), &o->max_lease_tables_per_uid);
}

absl::Status ApplyWatchLog(const std::string& value, const std::string& field, DaemonOptions* o) {
  return Store(ParsePositiveCount(value, field, 1u << 24), &o->watch_log);
}

absl::Status ApplyPrefixRule(bool readers, const std::string& prefix, const std::string& value,
                             const std::string& field, DaemonOptions* o) {
  if (prefix.empty()) return absl::InvalidArgumentError(field + ": the prefix is empty");
  if (absl::Status s = ValidatePrefix(prefix, field); !s.ok()) return s;
  auto set = PrincipalSet::ParseList(value, field);
  if (!set.ok()) return set.status();
  PrefixRule& rule = o->access.prefix_rules[prefix];
  (readers ? rule.readers : rule.publishers) = *std::move(set);
  return absl::OkStatus();
}

absl::Status ApplyRemoteOf(const std::string& prefix, const std::string& value,
                           const std::string& field, DaemonOptions* o) {
  if (prefix.empty()) return absl::InvalidArgumentError(field + ": the prefix is empty");
  if (absl::Status s = ValidatePrefix(prefix, field); !s.ok()) return s;
  auto address = ParsePeerAddress(value, field);
  if (!address.ok()) return address.status();
  o->remote[prefix] = *std::move(address);
  return absl::OkStatus();
}

absl::Status ApplyReadersOf(const std::string& prefix, const std::string& value,
                            const std::string& field, DaemonOptions* o) {
  return ApplyPrefixRule(true, prefix, value, field, o);
}

absl::Status ApplyPublishersOf(const std::string& prefix, const std::string& value,
                               const std::string& field, DaemonOptions* o) {
  return ApplyPrefixRule(false, prefix, value, field, o);
}

// Sets (*by_uid)[the uid `user` names] to what `parsed` holds; the user's error comes first.
absl::Status StoreForUser(const std::string& user, const std::string& field,
                          absl::StatusOr<uint64_t> parsed, std::map<uint32_t, uint64_t>* by_uid) {
  auto uid = ParseUserArgument(user, field);
  if (!uid.ok()) return uid.status();
  if (!parsed.ok()) return parsed.status();
  (*by_uid)[*uid] = *parsed;
  return absl::OkStatus();
}

absl::Status ApplyQuotaBytesOf(const std::string& user, const std::string& value,
                               const std::string& field, DaemonOptions* o) {
  return StoreForUser(user, field, ParseByteSize(value, field), &o->access.quota_bytes_by_uid);
}

absl::Status ApplyQuotaTensorsOf(const std::string& user, const std::string& value,
                                 const std::string& field, DaemonOptions* o) {
  return StoreForUser(user, field, ParseCount(value, field, UINT64_MAX),
                      &o->access.quota_tensors_by_uid);
}

// --print-config's values (OptionKey::print).
std::string PrintSocket(const DaemonOptions& o) { return o.socket_path; }
std::string PrintCapacity(const DaemonOptions& o) {
  return absl::StrCat(o.capacity_bytes, "  # ", FormatByteSize(o.capacity_bytes));
}
std::string PrintCudaCapacity(const DaemonOptions& o) {
  if (!o.cuda_capacity_bytes.has_value()) return "";
  return absl::StrCat(*o.cuda_capacity_bytes, "  # ", FormatByteSize(*o.cuda_capacity_bytes),
                      " per GPU");
}
std::string PrintCudaHandles(const DaemonOptions& o) {
  return o.cuda_handles == CudaHandles::kVmm ? "vmm" : "ipc";
}
std::string PrintLogLevel(const DaemonOptions& o) { return std::string(LogLevelName(o.log_level)); }
std::string PrintMetricsListen(const DaemonOptions& o) { return o.metrics_listen; }
std::string PrintPeerListen(const DaemonOptions& o) { return o.peer_listen; }
std::string PrintTlsCert(const DaemonOptions& o) { return o.tls.cert; }
std::string PrintTlsKey(const DaemonOptions& o) { return o.tls.key; }
std::string PrintTlsCa(const DaemonOptions& o) { return o.tls.ca; }
std::string PrintAdminGroup(const DaemonOptions& o) { return o.admin_group; }
std::string PrintDefaultReaders(const DaemonOptions& o) {
  return absl::StrJoin(o.access.default_readers.Entries(), ",");
}
std::string PrintQuotaBytes(const DaemonOptions& o) {
  const uint64_t bytes = o.access.default_quota.bytes;
  return absl::StrCat(bytes, "  # ", bytes == 0 ? std::string("unlimited") : FormatByteSize(bytes));
}
std::string PrintQuotaTensors(const DaemonOptions& o) {
  const uint64_t tensors = o.access.default_quota.tensors;
  return absl::StrCat(tensors, tensors == 0 ? "  # unlimited" : "");
}
std::string PrintPendingTimeout(const DaemonOptions& o) {
  return absl::FormatDuration(o.pending_timeout);
}
std::string PrintHandshakeTimeout(const DaemonOptions& o) {
  return absl::FormatDuration(o.handshake_timeout);
}
std::string PrintFetchStallTimeout(const DaemonOptions& o) {
  return absl::FormatDuration(o.fetch_stall_timeout);
}
std::string PrintMaxConnections(const DaemonOptions& o) { return absl::StrCat(o.max_connections); }
std::string PrintMaxLeaseTablesPerUid(const DaemonOptions& o) {
  return absl::StrCat(o.max_lease_tables_per_uid);
}
std::string PrintWatchLog(const DaemonOptions& o) { return absl::StrCat(o.watch_log); }

// What "(now: ...)" says in the help of socket and capacity.
std::string DefaultSocketNow() { return ResolveDefaultSocketPath(); }
std::string DefaultCapacityNow() { return FormatByteSize(DefaultCapacityBytes()); }

const OptionKey kOptionKeys[] = {
    {"socket", "PATH", ApplySocket, PrintSocket, "", DefaultSocketNow,
     "Unix socket to serve on. Default: $TENSORBROKER_SOCKET, else\n"
     "/run/tensorbroker/broker.sock for root, else\n"
     "$XDG_RUNTIME_DIR/tensorbroker/broker.sock, else\n"
     "/tmp/tensorbroker-$UID/broker.sock (now: {now}).\n"
     "One daemon per socket (PATH.lock is held); a stale socket left\n"
     "by a dead daemon is replaced."},
    {"capacity", "SIZE", ApplyCapacity, PrintCapacity, "", DefaultCapacityNow,
     "Most shared memory to reserve, e.g. 512M, 4G, 1.5GiB or plain\n"
     "bytes. Default: half of /dev/shm (now: {now})."},
    {"cuda-capacity", "SIZE", ApplyCudaCapacity, PrintCudaCapacity, "half of each GPU's memory",
     nullptr,
     "Most device memory to hold on each GPU, in slabs allocated as\n"
     "needed. Default: half of each GPU's memory. 0: serve no CUDA\n"
     "tensors. Without a usable GPU only CPU tensors are served."},
    {"cuda-handles", "KIND", ApplyCudaHandles, PrintCudaHandles, "", nullptr,
     "How GPU memory reaches clients: ipc (default), legacy CUDA\n"
     "IPC handles; or vmm, CUDA VMM allocations handed over as file\n"
     "descriptors on the local channel (read-only mappings for\n"
     "readers where the GPU can; no hostPID in Kubernetes). A GPU\n"
     "without VMM and POSIX descriptors keeps ipc (logged; see stats)."},
    {"log-level", "LEVEL", ApplyLogLevel, PrintLogLevel, "", nullptr,
     "error, warning, notice, info (default) or debug. Logs go to\n"
     "stderr with syslog priority prefixes (<3>..<7>)."},
    {"metrics-listen", "ADDR", ApplyMetricsListen, PrintMetricsListen, "no HTTP /metrics", nullptr,
     "Also serve the Prometheus metrics over HTTP at\n"
     "http://ADDR/metrics; ADDR is HOST:PORT, [IPV6]:PORT or :PORT\n"
     "(every interface), e.g. 127.0.0.1:9464. Default: off."},
    {"peer-listen", "ADDR", ApplyPeerListen, PrintPeerListen, "no peers (no TCP)", nullptr,
     "Serve other brokers over TCP at ADDR (HOST:PORT, [IPV6]:PORT\n"
     "or :PORT), with mutual TLS only: a peer must present a\n"
     "certificate --tls-ca signed. Peers may read (Stat, Read, List,\n"
     "Watch) the tensors whose readers name them (peer:NAME, NAME\n"
     "their certificate's common name or a DNS name) or *. Needs\n"
     "--tls-cert, --tls-key and --tls-ca. Default: off."},
    {"tls-cert", "PATH", ApplyTlsCert, PrintTlsCert, "none", nullptr,
     "This broker's certificate chain (PEM), its own first: what it\n"
     "shows its peers, which know it by its names."},
    {"tls-key", "PATH", ApplyTlsKey, PrintTlsKey, "none", nullptr,
     "The private key (PEM) of --tls-cert; keep it readable by the\n"
     "daemon's user only."},
    {"tls-ca", "PATH", ApplyTlsCa, PrintTlsCa, "none", nullptr,
     "The CA certificates (PEM) every broker's certificate is signed\n"
     "by: peers are refused unless theirs verifies against them."},
    {"admin-group", "GROUP", ApplyAdminGroup, PrintAdminGroup, "root only", nullptr,
     "Members of GROUP (and root) may replace, delete and read every\n"
     "tensor and see every user's usage. Default: none (root only)."},
    {"default-readers", "LIST", ApplyDefaultReaders, PrintDefaultReaders, "", nullptr,
     "Who may read a tensor whose Put or Create names no readers (its\n"
     "owner and administrators always may): comma-separated uid:N,\n"
     "gid:N, user:NAME, group:NAME, peer:NAME (a broker, see\n"
     "--peer-listen), or * for anyone who may connect, peers too.\n"
     "Default: *. The config file may set readers[PREFIX] and\n"
     "publishers[PREFIX] for the names under PREFIX."},
    {"quota-bytes", "SIZE", ApplyQuotaBytes, PrintQuotaBytes, "", nullptr,
     "Most bytes each user may hold (every version in memory that\n"
     "they created). 0 (default): unlimited. The config file may set\n"
     "quota-bytes[USER] for one user (a name or uid:N)."},
    {"quota-tensors", "N", ApplyQuotaTensors, PrintQuotaTensors, "", nullptr,
     "Most tensors each user may hold; 0 (default): unlimited.\n"
     "quota-tensors[USER] in the config file, for one user."},
    {"pending-timeout", "DURATION", ApplyPendingTimeout, PrintPendingTimeout, "", nullptr,
     "Abort a Create not sealed, or a Put not finished, this long\n"
     "after it began, freeing its name: 60s (default), 5m, 500ms..."},
    {"handshake-timeout", "DURATION", ApplyHandshakeTimeout, PrintHandshakeTimeout, "", nullptr,
     "Close a connection that has made no call (gRPC socket) or\n"
     "opened no session (local channel) this long after it\n"
     "connected. Default: 10s."},
    {"max-connections", "N", ApplyMaxConnections, PrintMaxConnections, "", nullptr,
     "Most client connections at once on each socket (the gRPC\n"
     "socket and the local channel, SOCKET.fd, and the peer port\n"
     "of --peer-listen, at most 64 of them from one host); more\n"
     "are closed at once. Default: 4096. Connections of the\n"
     "daemon's own uid (its health check) have 16 more in\n"
     "reserve on each socket."},
    {"max-lease-tables-per-uid", "N", ApplyMaxLeaseTablesPerUid, PrintMaxLeaseTablesPerUid, "",
     nullptr,
     "Most clients of one user (no administrator) at once that read\n"
     "without a round trip (each maps a lease table of its own); the\n"
     "others read through the daemon. Default: 64."},
    {"fetch-stall-timeout", "DURATION", ApplyFetchStallTimeout, PrintFetchStallTimeout, "", nullptr,
     "Cut a fetch from a remote[] peer that brings less than 1 MiB\n"
     "(or all it still lacks) within this long, naming the peer and\n"
     "what it sent. Default: 10s."},
    {"watch-log", "N", ApplyWatchLog, PrintWatchLog, "", nullptr,
     "Events the daemon remembers for Watch streams (the newest N):\n"
     "a watcher further behind, or resuming from before them, gets\n"
     "one LOST event for what it missed. Default: 16384 (about 5 MB)."},
};

const KeyedOptionKey kKeyedOptionKeys[] = {
    {"readers", "PREFIX", ApplyReadersOf},      {"publishers", "PREFIX", ApplyPublishersOf},
    {"quota-bytes", "USER", ApplyQuotaBytesOf}, {"quota-tensors", "USER", ApplyQuotaTensorsOf},
    {"remote", "PREFIX", ApplyRemoteOf},
};

}  // namespace

absl::Span<const OptionKey> OptionKeys() { return kOptionKeys; }

absl::Span<const KeyedOptionKey> KeyedOptionKeys() { return kKeyedOptionKeys; }

const OptionKey* FindOptionKey(absl::string_view key) {
  for (const OptionKey& entry : kOptionKeys) {
    if (entry.key == key) return &entry;
  }
  return nullptr;
}

const KeyedOptionKey* FindKeyedOptionKey(absl::string_view key) {
  for (const KeyedOptionKey& entry : kKeyedOptionKeys) {
    if (entry.key == key) return &entry;
  }
  return nullptr;
}

std::string KeyList() {
  std::vector<std::string> keys;
  for (const OptionKey& entry : kOptionKeys) keys.emplace_back(entry.key);
  for (const KeyedOptionKey& entry : kKeyedOptionKeys) {
    keys.push_back(absl::StrCat(entry.key, "[", entry.argument, "]"));
  }
  return absl::StrJoin(keys, ", ");
}

}  // namespace tensorbroker::daemon
