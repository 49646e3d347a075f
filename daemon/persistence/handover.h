// A hand-over without systemd (tensorbrokerd --takeover): the running daemon gives a new one,
// over its local channel, every descriptor the new one needs to serve in its place: the
// memory segments and CUDA VMM slabs and a record per published tensor that can outlive it (named
// as in systemd's descriptor store, fd_store_journal.h, so that the new daemon adopts them exactly
// as after a restart, adoption.h), its instance lock ("lock": the lock is the open file, so it
// passes with it) and its listening sockets ("socket": clients that connect meanwhile wait in their
// backlog).
//
// Threading: HandoverCollector is filled under the store's lock by one thread; the functions
// are stateless.
#ifndef TENSORBROKER_DAEMON_HANDOVER_H_
#define TENSORBROKER_DAEMON_HANDOVER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/base/listen_fds.h"
#include "daemon/store/tensor_journal.h"

namespace tensorbroker::daemon {

inline constexpr char kHandedLockName[] = "lock";
inline constexpr char kHandedSocketName[] = "socket";

// What the running daemon hands over, gathered by replaying its state as journal calls
// (TensorStore::ExportState): a duplicate of each segment's read-write descriptor and a sealed
// record memfd per tensor, under the descriptor store's names.
class HandoverCollector final : public TensorJournal {
 public:
  void SegmentCreated(const MemfdSegment& segment) override;
  void SegmentRemoved(const std::string& segment) override;
  void CudaSlabCreated(const std::string& slab, int fd) override;
  void CudaSlabRemoved(const std::string& slab) override;
  void TensorPublished(const JournaledTensor& tensor) override;
  void TensorUnpublished(uint64_t version) override;
  // A descriptor of another kind (the lock, the sockets), duplicated.
  void Add(const std::string& name, int fd);
  // The first failure (a descriptor or record that could not be made), or OK.
  const absl::Status& status() const { return status_; }
  std::vector<NamedFd> Take() { return std::move(fds_); }

 private:
  void Drop(const std::string& name);  // closes what is kept under `name`

  std::vector<NamedFd> fds_;
  absl::Status status_;
};

// Sends `fds` on `socket` (a local channel connection; non-blocking) as HandedOver replies to
// `request_id`, a few descriptors each, the last one marked; waits while the socket is full, up
// to `timeout` in all (DEADLINE_EXCEEDED).
absl::Status SendHandover(int socket, uint64_t request_id, const std::vector<NamedFd>& fds,
                          absl::Duration timeout);

// The new daemon's side: asks the daemon serving the local channel at `local_path` to hand
// over, and returns what it handed. FAILED_PRECONDITION when nothing serves there, or a daemon
// of a uid that is neither this process's nor root's (nothing is sent to it); the running
// daemon's own error when it refuses; DEADLINE_EXCEEDED after `timeout`.
absl::StatusOr<std::vector<NamedFd>> RequestTakeover(const std::string& local_path,
                                                     absl::Duration timeout);

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_HANDOVER_H_
