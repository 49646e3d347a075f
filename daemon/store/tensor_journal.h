// Where the store tells each tensor version published and unpublished whose memory can outlive
// the daemon (CPU segments, CUDA VMM slabs): the tensor half of the
// PersistenceJournal (daemon/base/persistence_journal.h, whose ordering rules hold here too), in
// the store's own types. daemon/persistence writes each as a v1.TensorRecord.
#ifndef TENSORBROKER_DAEMON_TENSOR_JOURNAL_H_
#define TENSORBROKER_DAEMON_TENSOR_JOURNAL_H_

#include <cstdint>
#include <string>

#include "daemon/base/persistence_journal.h"
#include "daemon/store/store_types.h"

namespace tensorbroker::daemon {

// A published version and where its bytes lie.
struct JournaledTensor {
  TensorView view;  // leases 0: they end with the instance
  uint32_t publisher_uid = 0;
  std::string segment;  // or CUDA slab
  uint64_t segment_size = 0;
  uint64_t offset = 0;
  uint64_t block_size = 0;
};

class TensorJournal : public PersistenceJournal {
 public:
  virtual void TensorPublished(const JournaledTensor& tensor) = 0;
  virtual void TensorUnpublished(uint64_t version) = 0;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_TENSOR_JOURNAL_H_
