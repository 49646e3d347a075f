// What a new instance makes of the descriptors the service manager handed it at start
// (listen_fds.h): the segments ("s-<segment>") and tensor records ("r-<version>") that a
// previous instance kept with FdStoreJournal. Nothing in them is trusted: each segment must
// still be what MemfdSegment::Create made, each record must read (tensor_record.h) and
// validate like a client's request (name, dtype, layout, readers, sizes), and its bytes must
// lie in a segment that was handed over, at a range no other adopted tensor claims. Of several
// versions of one name (a history it keeps, or a replace that a kill interrupted) the highest
// that checks out is adopted, with the next ones down to the number its keep asks for.
//
// Whatever is not adopted is dropped from the descriptor store, with a warning, so that it
// never comes back: records that fail a check or lost to a higher version, and segments no
// adopted tensor lies in (through the pool's journal). A segment or record name handed over
// more than once is used once, its first descriptor: the others are closed but not dropped
// from the store, since dropping is by name and would take the first one too. Descriptors of
// other names (sockets) are returned untouched.
#ifndef TENSORBROKER_DAEMON_ADOPTION_H_
#define TENSORBROKER_DAEMON_ADOPTION_H_

#include <cstdint>
#include <vector>

#include "daemon/base/listen_fds.h"
#include "daemon/memory/cpu_segment_pool.h"
#include "daemon/persistence/fd_store.h"
#include "daemon/store/tensor_store.h"

namespace tensorbroker::daemon {

struct Adoption {
  std::vector<TensorStore::AdoptedTensor> tensors;  // their blocks already taken in the pool
  std::vector<NamedFd> others;                      // neither a segment nor a record
  uint64_t bytes = 0;                               // of the adopted tensors
  size_t segments = 0;                              // holding adopted tensors
  size_t segments_freed = 0;                        // handed over, holding none
  size_t records_dropped = 0;  // unreadable, invalid, superseded or a name's second descriptor
};

// `pool` must be fresh (serving nothing yet) and journal to `store`'s service manager.
Adoption AdoptStoredDescriptors(std::vector<NamedFd> descriptors, CpuSegmentPool* pool,
                                const FdStore& store);

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_ADOPTION_H_
