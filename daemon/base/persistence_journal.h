// What a restarted daemon needs to adopt the sealed tensors in memory that can outlive it (CPU
// segments, and CUDA slabs made with the VMM API: their descriptors keep the memory), told as
// it happens: segments and slabs as they are created and removed (here), tensor versions as
// they are published and unpublished (TensorJournal, daemon/store/tensor_journal.h, which
// extends this).
//
// Order is what makes a kill at any instant safe: calls are made under the store's lock, in
// the order of the changes. A version is told published only once its bytes are final (at
// Seal or at the end of a Put), and told unpublished (Delete, replace) before its memory can
// be freed or reused; a segment is told created before any version in it, and removed after
// every version in it was unpublished. So a record that survives a kill names bytes that were
// final and never reused; a replace that a kill interrupts leaves two versions of a name, and
// the higher one wins at adoption.
//
// The owner stops the journal before destroying the store and the pools (their teardown frees
// memory in this process only). Implementations must not call back into the store. A failure to
// record is the implementation's to log: the tensor is served all the same, it just would not
// survive.
#ifndef TENSORBROKER_DAEMON_PERSISTENCE_JOURNAL_H_
#define TENSORBROKER_DAEMON_PERSISTENCE_JOURNAL_H_

#include <string>

namespace tensorbroker::daemon {

class MemfdSegment;

class PersistenceJournal {
 public:
  virtual ~PersistenceJournal() = default;
  virtual void SegmentCreated(const MemfdSegment& segment) = 0;
  virtual void SegmentRemoved(const std::string& segment) = 0;
  // A CUDA VMM slab and its exported descriptor (borrowed: duplicate it to keep it).
  virtual void CudaSlabCreated(const std::string& slab, int fd) = 0;
  virtual void CudaSlabRemoved(const std::string& slab) = 0;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_PERSISTENCE_JOURNAL_H_
