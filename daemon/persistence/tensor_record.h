// A TensorRecord (proto/tensorbroker/v1/state.proto) in a sealed memfd of its own: the form in
// which a published CPU tensor's description is kept with the service manager (fd_store.h) and
// handed to the next instance. The seals (no write, shrink or grow) make the kernel keep it
// exactly as written; reading checks them, the size and the format, so a record that is not
// one of ours is refused, never trusted.
#ifndef TENSORBROKER_DAEMON_TENSOR_RECORD_H_
#define TENSORBROKER_DAEMON_TENSOR_RECORD_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "common/unique_fd.h"
#include "daemon/store/tensor_journal.h"
#include "tensorbroker/v1/state.pb.h"

namespace tensorbroker::daemon {

inline constexpr uint32_t kTensorRecordFormat = 1;
inline constexpr uint64_t kMaxTensorRecordBytes = 64 * 1024;

// The record of a journaled version (its info written by daemon/wire/store_proto.h).
v1::TensorRecord TensorRecordOf(const JournaledTensor& tensor);

// A new sealed memfd holding `record` (its format set). INVALID_ARGUMENT when it would exceed
// kMaxTensorRecordBytes; RESOURCE_EXHAUSTED or INTERNAL when the kernel refuses.
absl::StatusOr<UniqueFd> WriteTensorRecord(v1::TensorRecord record);

// The record in `fd` (borrowed). INVALID_ARGUMENT, saying why, when `fd` is not a sealed memfd
// of at most kMaxTensorRecordBytes holding a record of kTensorRecordFormat.
absl::StatusOr<v1::TensorRecord> ReadTensorRecord(int fd);

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_TENSOR_RECORD_H_
