// The store's reports (store_types.h) written out as the wire messages: a tensor's view, a watch
// event and the counters of Stats. The one conversion of each; the client reads them back into
// its public types with common/wire/proto_convert.h. Stateless.
#ifndef TENSORBROKER_DAEMON_STORE_PROTO_H_
#define TENSORBROKER_DAEMON_STORE_PROTO_H_

#include "daemon/store/store_types.h"
#include "tensorbroker/v1/broker.pb.h"

namespace tensorbroker::daemon {

// For CUDA the device also carries the GPU's UUID.
void ToProto(const TensorView& view, v1::TensorInfo* out);
// A kLost event has no info.
void ToProto(const StoreEvent& event, v1::WatchEvent* out);
// The counters, pools and users; the per-method figures are the front end's to add
// (call_metrics.h). Each counter goes to the uint64 field named as its common/stats_schema.h row.
void ToProto(const StoreStats& stats, v1::BrokerStats* out);

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_STORE_PROTO_H_
