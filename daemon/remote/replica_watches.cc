#include "daemon/remote/replica_watches.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/mutex.h"
#include "daemon/base/log.h"

namespace tensorbroker::daemon {
namespace {

// A Ping's or a Stat's limit.
constexpr absl::Duration kCallTimeout = absl::Seconds(30);

// What one re-check did, for the log.
struct RecheckCounts {
  size_t checked = 0;
  size_t newer = 0;
  size_t gone = 0;
};

// A call's end as the log says it: "UNAVAILABLE: failed to connect to all addresses".
absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat(absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())),
                   ": ", LogSafe(status.error_message())));
}

std::string Describe(const RecheckCounts& counts) {
  return absl::StrCat("re-checked ", counts.checked, " replica(s): ", counts.newer,
                      " newer there (fetched), ", counts.gone, " gone there (dropped)");
}

}  // namespace

ReplicaWatches::ReplicaWatches(PeerChannels* channels, TensorStore* store, Refresh refresh)
    : channels_(channels), store_(store), refresh_(std::move(refresh)) {}

ReplicaWatches::~ReplicaWatches() { Stop(); }

void ReplicaWatches::Follow(const std::string& prefix, const PeerEndpoint& origin) {
  MutexLock lock(mu_);
  if (stopping_) return;
  const std::string key = absl::StrCat(prefix, "\n", origin.target);
  if (watches_.count(key) != 0) return;
  if (watches_.size() >= kMaxReplicaWatches) {
    if (!full_logged_) {
      Log(LogLevel::kWarning, "remote: ", kMaxReplicaWatches,
          " watches already; replicas from peer ", origin.label,
          " are not kept fresh (a Get after their eviction fetches them anew)");
      full_logged_ = true;
    }
    return;
  }
  auto watch = std::make_unique<Watch>();
  watch->prefix = prefix;
  watch->origin = origin;
  watch->what = absl::StrCat("the watch of '", LogSafe(prefix), "' at peer ", origin.label);
  Watch* raw = watch.get();
  watch->thread = std::thread([this, raw] { Run(*raw); });
  watches_.emplace(key, std::move(watch));
}

void ReplicaWatches::Stop() {
  std::map<std::string, std::unique_ptr<Watch>> watches;
  {
    MutexLock lock(mu_);
    stopping_ = true;
    watches = std::move(watches_);
    watches_.clear();
  }
  stop_.notify_all();
  channels_->CancelAll();  // the streams the threads block on end
  for (auto& [key, watch] : watches) watch->thread.join();
}

bool ReplicaWatches::Pause(absl::Duration how_long) {
  const absl::Time until = absl::Now() + how_long;
  MutexLock lock(mu_);
  while (!stopping_ && absl::Now() < until) {
    stop_.wait_for(lock, absl::ToChronoNanoseconds(until - absl::Now()));
  }
  return !stopping_;
}

void ReplicaWatches::Run(const Watch& watch) {
  // From the oldest version held: what happened there since the fetches is replayed.
  std::optional<uint64_t> after;
  const std::map<std::string, uint64_t> held =
      store_->ReplicasFrom(watch.prefix, watch.origin.target);
  for (const auto& [name, version] : held) after = std::min(after.value_or(version), version);
  absl::Duration backoff = kFirstWatchBackoff;
  bool ever_connected = false;
  bool outage_logged = false;
  while (true) {
    bool connected = false;
    const absl::Status ended = Stream(watch, &after, ever_connected, &connected);
    {
      MutexLock lock(mu_);
      if (stopping_ || channels_->cancelled()) return;  // the daemon is stopping
    }
    if (connected) {
      ever_connected = true;
      outage_logged = false;
      backoff = kFirstWatchBackoff;
    }
    const size_t replicas = store_->ReplicasFrom(watch.prefix, watch.origin.target).size();
    Log(outage_logged ? LogLevel::kDebug : LogLevel::kWarning, "remote: ", watch.what,
        connected ? " ended: " : " cannot start: ", ended.message(), "; its ", replicas,
        " replica(s) here keep serving; trying again in ", absl::FormatDuration(backoff));
    outage_logged = true;
    if (!Pause(backoff)) return;
    backoff = std::min(backoff * 2, kLastWatchBackoff);
  }
}

absl::Status ReplicaWatches::Ping(v1::Broker::Stub& stub) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kCallTimeout));
  auto registered = channels_->Register(&context);
  if (!registered.ok()) return registered.status();
  v1::Empty request;
  v1::Empty answer;
  return FromGrpc(stub.Ping(&context, request, &answer));
}

absl::Status ReplicaWatches::Stream(const Watch& watch, std::optional<uint64_t>* after,
                                    bool recheck, bool* connected) {
  auto stub = v1::Broker::NewStub(channels_->ChannelFor(watch.origin));
  if (absl::Status answered = Ping(*stub); !answered.ok()) return answered;
  *connected = true;
  grpc::ClientContext context;
  auto registered = channels_->Register(&context);
  if (!registered.ok()) return registered.status();
  v1::WatchRequest request;
  request.set_prefix(watch.prefix);
  if (after->has_value()) request.set_after_version(**after);
  auto reader = stub->Watch(&context, request);
  // The broker sends it once the watch is registered: every event from then on reaches here.
  reader->WaitForInitialMetadata();
  if (recheck) {
    if (absl::Status checked = Recheck(watch, *stub, "is back"); !checked.ok()) {
      context.TryCancel();
      (void)reader->Finish();
      return checked;
    }
  } else {
    Log(LogLevel::kInfo, "remote: ", watch.what,
        " follows its replicas here (new versions are "
        "fetched, deletions unpublish them)");
  }
  v1::WatchEvent event;
  while (reader->Read(&event)) {
    *after = event.sequence();
    if (Apply(watch, event)) {
      const std::string why =
          absl::StrCat("missed events ", event.lost_first(), " to ", event.lost_last());
      if (absl::Status checked = Recheck(watch, *stub, why); !checked.ok()) {
        context.TryCancel();
        (void)reader->Finish();
        return checked;
      }
    }
  }
  return FromGrpc(reader->Finish());
}

bool ReplicaWatches::Apply(const Watch& watch, const v1::WatchEvent& event) {
  if (event.kind() == v1::WatchEvent::LOST) return true;
  if (!absl::StartsWith(event.name(), watch.prefix)) {
    ProtocolError(watch, absl::StrCat("an event about '", LogSafe(event.name()),
                                      "', which is not under the watched prefix"));
    return false;
  }
  switch (event.kind()) {
    case v1::WatchEvent::PUBLISHED:
    case v1::WatchEvent::REPLACED: {
      const std::optional<uint64_t> held =
          store_->ReplicaVersion(event.name(), watch.origin.target);
      if (held.has_value() && *held < event.version()) refresh_(event.name());
      return false;
    }
    case v1::WatchEvent::DELETED:
      if (store_->DropReplica(event.name(), event.version(), watch.origin.target,
                              absl::StrCat("deleted there at its version ", event.version())) ==
          TensorStore::ReplicaDrop::kFromAnotherOrigin) {
        ProtocolError(watch, absl::StrCat("a deletion of '", LogSafe(event.name()),
                                          "', whose replica here came from another peer"));
      }
      return false;
    default:
      return false;  // EXPIRED: an older version of the origin's history
  }
}

void ReplicaWatches::ProtocolError(const Watch& watch, absl::string_view what) {
  ++watch.protocol_errors;
  Log(watch.protocol_errors == 1 ? LogLevel::kWarning : LogLevel::kDebug, "remote: ", watch.what,
      ": protocol error of the peer (", watch.protocol_errors, " so far): it sent ", what,
      "; ignored (an origin may change only the replicas it sent)");
}

absl::Status ReplicaWatches::Recheck(const Watch& watch, v1::Broker::Stub& stub,
                                     absl::string_view why) {
  RecheckCounts counts;
  for (const auto& [name, held] : store_->ReplicasFrom(watch.prefix, watch.origin.target)) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kCallTimeout));
    auto registered = channels_->Register(&context);
    if (!registered.ok()) return registered.status();
    v1::StatRequest request;
    request.set_name(name);
    v1::TensorInfo info;
    const grpc::Status status = stub.Stat(&context, request, &info);
    ++counts.checked;
    if (status.error_code() == grpc::StatusCode::NOT_FOUND) {
      if (store_->DropReplica(name, held, watch.origin.target, "no longer published there") ==
          TensorStore::ReplicaDrop::kDropped) {
        ++counts.gone;
      }
    } else if (!status.ok()) {
      return absl::UnavailableError(
          absl::StrCat("Stat of '", LogSafe(name), "': ", LogSafe(status.error_message())));
    } else if (info.name() != name) {
      ProtocolError(watch, absl::StrCat("a Stat answer about '", LogSafe(info.name()),
                                        "' when asked about '", LogSafe(name), "'"));
    } else if (info.version() > held) {
      refresh_(name);
      ++counts.newer;
    }
  }
  Log(LogLevel::kInfo, "remote: ", watch.what, " ", why, "; ", Describe(counts));
  return absl::OkStatus();
}

}  // namespace tensorbroker::daemon
