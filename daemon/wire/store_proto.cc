#include "daemon/wire/store_proto.h"

#include <cstddef>
#include <string>

#include "common/stats_schema.h"
#include "common/wire/proto_convert.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace tensorbroker::daemon {
namespace {

v1::WatchEvent::Kind KindOf(StoreEvent::Kind kind) {
  switch (kind) {
    case StoreEvent::Kind::kPublished:
      return v1::WatchEvent::PUBLISHED;
    case StoreEvent::Kind::kReplaced:
      return v1::WatchEvent::REPLACED;
    case StoreEvent::Kind::kDeleted:
      return v1::WatchEvent::DELETED;
    case StoreEvent::Kind::kExpired:
      return v1::WatchEvent::EXPIRED;
    case StoreEvent::Kind::kLost:
      return v1::WatchEvent::LOST;
  }
  return v1::WatchEvent::PUBLISHED;
}

}  // namespace

void ToProto(const TensorView& view, v1::TensorInfo* out) {
  out->set_name(view.name);
  tensorbroker::ToProto(view.dtype, out->mutable_dtype());
  out->mutable_shape()->Assign(view.shape.begin(), view.shape.end());
  out->mutable_strides()->Assign(view.strides.begin(), view.strides.end());
  out->set_nbytes(view.nbytes);
  tensorbroker::ToProto(view.device, out->mutable_device());
  out->set_sealed(view.sealed);
  out->set_mutable_(view.is_mutable);
  out->set_version(view.version);
  out->set_leases(view.leases);
  out->set_created_unix_ms(view.created_unix_ms);
  out->set_owner_uid(view.owner_uid);
  for (const std::string& reader : view.readers) out->add_readers(reader);
  out->set_keep(view.keep);
  out->set_ephemeral(view.ephemeral);
  if (view.origin.has_value()) {
    v1::ReplicaOrigin* origin = out->mutable_origin();
    origin->set_peer(view.origin->peer);
    origin->set_version(view.origin->version);
    origin->set_fetched_unix_ms(view.origin->fetched_unix_ms);
  }
  out->mutable_kept_versions()->Assign(view.kept_versions.begin(), view.kept_versions.end());
}

void ToProto(const StoreEvent& event, v1::WatchEvent* out) {
  out->set_kind(KindOf(event.kind));
  out->set_sequence(event.sequence);
  out->set_name(event.name);
  out->set_version(event.version);
  out->set_previous_version(event.previous_version);
  if (event.kind != StoreEvent::Kind::kLost) ToProto(event.info, out->mutable_info());
  out->set_lost_first(event.lost_first);
  out->set_lost_last(event.lost_last);
}

void ToProto(const StoreStats& stats, v1::BrokerStats* out) {
  CountersToProto(kBrokerStatsRows<StoreStats>, stats, out);
  for (const StoreStats::Pool& usage : stats.pools) {
    v1::PoolStats* pool = out->add_pools();
    tensorbroker::ToProto(usage.device, pool->mutable_device());
    CountersToProto(kPoolStatsRows<StoreStats::Pool>, usage, pool);
    pool->set_handles(usage.handles);
  }
  for (const StoreStats::User& usage : stats.users) {
    v1::UserUsage* user = out->add_users();
    user->set_uid(usage.uid);
    user->set_user(usage.user);
    CountersToProto(kUserStatsRows<StoreStats::User>, usage, user);
  }
  for (const StoreStats::Remote& usage : stats.remotes) {
    v1::RemoteUsage* remote = out->add_remotes();
    remote->set_peer(usage.peer);
    CountersToProto(kRemoteStatsRows<StoreStats::Remote>, usage, remote);
  }
}

}  // namespace tensorbroker::daemon
