// The PersistenceJournal kept in systemd's descriptor store (fd_store.h): each segment's
// read-write descriptor under "s-<segment>", each published version's TensorRecord (in a
// sealed memfd, tensor_record.h) under "r-<version>". A removal is FDSTOREREMOVE=1 of that
// name. Nothing is removed at shutdown: what is stored is what the next instance adopts.
// Thread-safe as FdStore is; failures are logged as warnings.
#ifndef TENSORBROKER_DAEMON_FD_STORE_JOURNAL_H_
#define TENSORBROKER_DAEMON_FD_STORE_JOURNAL_H_

#include <string>

#include "daemon/fd_store.h"
#include "daemon/persistence_journal.h"

namespace tensorbroker::daemon {

// The descriptor-store names of a segment and of a version's record.
std::string SegmentFdName(const std::string& segment);
std::string RecordFdName(uint64_t version);

class FdStoreJournal final : public PersistenceJournal {
 public:
  explicit FdStoreJournal(FdStore store) : store_(store) {}

  void SegmentCreated(const MemfdSegment& segment) override;
  void SegmentRemoved(const std::string& segment) override;
  void TensorPublished(const v1::TensorRecord& record) override;
  void TensorUnpublished(uint64_t version) override;

 private:
  const FdStore store_;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_FD_STORE_JOURNAL_H_
