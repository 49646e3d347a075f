// How the CLI shows what the broker reports: TensorInfo and BrokerStats as JSON objects (the
// stable, scriptable form) and as human text (aligned "key: value" lines, a table for `ls`).
// Pure functions, thread-safe.
//
// Tensor JSON object keys: name, dtype (NumPy spelling), shape, strides (elements), nbytes,
// device ("cpu", "cuda:N", "cuda_host", or "device(type=T,id=N)"), sealed, mutable, version,
// leases, created_unix_ms.
// Stats: the rows of common/stats_schema.h, in its order. JSON: as WalkStats walks them ("pools"
// and "users" lists last); text: a line per row, then one per GPU pool and one per user.
#ifndef TENSORBROKER_CLI_INFO_FORMAT_H_
#define TENSORBROKER_CLI_INFO_FORMAT_H_

#include <dlpack/dlpack.h>

#include <string>
#include <vector>

#include "cli/json_writer.h"
#include "tensorbroker/client.h"

namespace tensorbroker::cli {

void WriteTensorInfoJson(const TensorInfo& info, JsonWriter& json);
// One JSON object, no trailing newline.
std::string TensorInfoJson(const TensorInfo& info);
// A JSON array of TensorInfoJson objects, no trailing newline.
std::string TensorListJson(const std::vector<TensorInfo>& infos);
std::string StatsJson(const BrokerStats& stats);

// "key: value" lines, values aligned, each line ending in '\n'.
std::string TensorInfoText(const TensorInfo& info);
// One line per watch event (no newline): "SEQ KIND NAME vVERSION DTYPE[SHAPE] SIZE", or
// "SEQ lost FIRST..LAST"; and as one JSON object.
std::string WatchEventText(const WatchEvent& event);
std::string WatchEventJson(const WatchEvent& event);
// A header line and one line per tensor: NAME DTYPE SHAPE SIZE VERSION LEASES.
std::string TensorTableText(const std::vector<TensorInfo>& infos);
std::string StatsText(const BrokerStats& stats);

}  // namespace tensorbroker::cli

#endif  // TENSORBROKER_CLI_INFO_FORMAT_H_
