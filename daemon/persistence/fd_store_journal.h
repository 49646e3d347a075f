// The journal (TensorJournal) kept in systemd's descriptor store (fd_store.h): each segment's
// read-write descriptor under "s-<segment>", each CUDA VMM slab's descriptor under "g-<slab>",
// each published version's TensorRecord (in a sealed memfd, tensor_record.h) under
// "r-<version>". A removal is FDSTOREREMOVE=1 of that name. Nothing is removed at shutdown (Stop):
// what is stored is what the next instance adopts. Thread-safe as FdStore is; failures are logged
// as warnings.
#ifndef TENSORBROKER_DAEMON_FD_STORE_JOURNAL_H_
#define TENSORBROKER_DAEMON_FD_STORE_JOURNAL_H_

#include <atomic>
#include <string>

#include "daemon/persistence/fd_store.h"
#include "daemon/store/tensor_journal.h"

namespace tensorbroker::daemon {

// The descriptor-store names of a segment, of a CUDA slab and of a version's record.
std::string SegmentFdName(const std::string& segment);
std::string CudaSlabFdName(const std::string& slab);
std::string RecordFdName(uint64_t version);

class FdStoreJournal final : public TensorJournal {
 public:
  explicit FdStoreJournal(FdStore store) : store_(store) {}

  void SegmentCreated(const MemfdSegment& segment) override;
  void SegmentRemoved(const std::string& segment) override;
  void CudaSlabCreated(const std::string& slab, int fd) override;
  void CudaSlabRemoved(const std::string& slab) override;
  void TensorPublished(const JournaledTensor& tensor) override;
  void TensorUnpublished(uint64_t version) override;
  // Sends nothing more: called once every call has finished, before the store and the pools
  // are destroyed (which frees memory in this process, not in the descriptor store).
  void Stop() { stopped_.store(true); }

 private:
  bool stopped() const { return stopped_.load(); }

  const FdStore store_;
  std::atomic<bool> stopped_{false};
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_FD_STORE_JOURNAL_H_
