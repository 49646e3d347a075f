// What a new instance makes of the descriptors the service manager handed it at start
// (listen_fds.h): the segments ("s-<segment>"), CUDA VMM slabs ("g-<slab>") and tensor records
// ("r-<version>") that a previous instance kept with FdStoreJournal. Nothing in them is
// trusted: each segment must still be what MemfdSegment::Create made, each slab must import as
// a CUDA allocation of the size its records say on a GPU this instance serves with VMM, each
// record must read (tensor_record.h) and validate like a client's request (name, dtype, layout,
// device, readers, sizes), and its bytes must lie in a segment or slab that was handed over, at
// a range no other adopted tensor claims. Of several
// versions of one name (a history it keeps, or a replace that a kill interrupted) the highest
// that checks out is adopted, with the next ones down to the number its keep asks for.
//
// Whatever is not adopted is dropped from the descriptor store, with a warning, so that it
// never comes back: records that fail a check or lost to a higher version, and segments and
// slabs no adopted tensor lies in (through the pools' journal, or here for a slab no record
// named). A segment or record name handed over
// more than once is used once, its first descriptor: the others are closed but not dropped
// from the store, since dropping is by name and would take the first one too. Descriptors of
// other names (sockets) are returned untouched.
#ifndef TENSORBROKER_DAEMON_ADOPTION_H_
#define TENSORBROKER_DAEMON_ADOPTION_H_

#include <cstdint>
#include <vector>

#include "daemon/base/listen_fds.h"
#include "daemon/memory/memory_pool.h"
#include "daemon/persistence/fd_store.h"
#include "daemon/store/tensor_store.h"

namespace tensorbroker::daemon {

struct Adoption {
  std::vector<TensorStore::AdoptedTensor> tensors;  // their blocks already taken in the pools
  std::vector<NamedFd> others;                      // neither a segment, a slab nor a record
  uint64_t bytes = 0;                               // of the adopted tensors
  size_t cuda_tensors = 0;                          // of them, in CUDA slabs
  size_t segments = 0;                              // segments and slabs holding adopted tensors
  size_t segments_freed = 0;                        // handed over, holding none
  size_t records_dropped = 0;  // unreadable, invalid, superseded or a name's second descriptor
};

// `pools` (the CPU pool first, then the GPUs') must be fresh (serving nothing yet) and journal
// to `store`'s service manager.
Adoption AdoptStoredDescriptors(std::vector<NamedFd> descriptors,
                                const std::vector<MemoryPool*>& pools, const FdStore& store);

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_ADOPTION_H_
