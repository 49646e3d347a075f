// The store's reports (store_types.h) written out as the wire messages: a tensor's view, a watch
// event and the counters of Stats. The one conversion of each; the client reads them back into
// its public types with common/wire/proto_convert.h. Stateless.
#ifndef TENSORBROKER_DAEMON_STORE_PROTO_H_
#define TENSORBROKER_DAEMON_STORE_PROTO_H_

#include <cstddef>

#include "common/stats_schema.h"
#include "common/wire/proto_convert.h"
#include "daemon/store/store_types.h"
#include "google/protobuf/message.h"
#include "tensorbroker/v1/broker.pb.h"

namespace tensorbroker::daemon {

// Every counter of a common/stats_schema.h table, to the proto message's field of its name
// (for the daemon's own rows: the store's here, the front end's peers).
template <typename Struct, size_t N>
void CountersToProto(const StatsField<Struct> (&rows)[N], const Struct& in,
                     google::protobuf::Message* out) {
  for (const StatsField<Struct>& row : rows) {
    const google::protobuf::FieldDescriptor* field = StatsCounterField(*out, row.key);
    if (field != nullptr) out->GetReflection()->SetUInt64(out, field, in.*row.member);
  }
}

// For CUDA the device also carries the GPU's UUID.
void ToProto(const TensorView& view, v1::TensorInfo* out);
// A kLost event has no info.
void ToProto(const StoreEvent& event, v1::WatchEvent* out);
// The counters, pools and users; the per-method figures are the front end's to add
// (call_metrics.h). Each counter goes to the uint64 field named as its common/stats_schema.h row.
void ToProto(const StoreStats& stats, v1::BrokerStats* out);

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_STORE_PROTO_H_
