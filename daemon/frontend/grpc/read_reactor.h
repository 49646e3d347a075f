// A Read stream as a gRPC callback reactor: the tensor's bytes go out in compact C order, one
// chunk of at most kMaxReadChunkBytes per write, the next one made when the previous write is
// done, so a slow reader holds a lease and one chunk, never a thread. Device memory is staged
// through the host first.
//
// Lifetime: made by BrokerService::Read, deletes itself in OnDone, which ends the read's lease.
// Threading: gRPC's reactions come one at a time; nothing else touches it.
#ifndef TENSORBROKER_DAEMON_READ_REACTOR_H_
#define TENSORBROKER_DAEMON_READ_REACTOR_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/strided_copy.h"
#include "daemon/store/tensor_store.h"
#include "tensorbroker/v1/broker.pb.h"

namespace tensorbroker::daemon {

class ReadReactor final : public grpc::ServerWriteReactor<v1::ReadResponse> {
 public:
  // `sent_bytes` (may be null, else outlives the reactor) counts the data bytes written.
  ReadReactor(TensorStore* store, const absl::StatusOr<Principal>& caller, std::string client,
              const std::string& name, size_t max_chunk,
              std::atomic<uint64_t>* sent_bytes = nullptr);

  void OnWriteDone(bool ok) override;
  void OnDone() override;

 private:
  absl::Status Begin(const Principal& caller, size_t max_chunk);
  void WriteNext();
  void End(const absl::Status& status);
  void ReleaseTicket();  // ends the read's lease, once

  TensorStore* const store_;
  const std::string client_;
  const std::string name_;
  std::atomic<uint64_t>* const sent_bytes_;
  std::optional<ReadTicket> ticket_;
  std::vector<uint8_t> staged_;  // device memory copied to the host
  std::vector<int64_t> shape_;
  std::vector<int64_t> strides_;
  std::unique_ptr<CompactChunker> chunker_;
  v1::ReadResponse response_;  // in flight until OnWriteDone
  bool sent_any_ = false;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_READ_REACTOR_H_
