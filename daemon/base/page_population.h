// Maps every page of a memory range in one call (madvise MADV_POPULATE_READ / _WRITE, Linux
// 5.14), rather than one page fault per 4 KiB page as the bytes are touched. A fault costs some
// 10 us on a VM, most of the time a large copy into or out of a fresh mapping takes (a replica's
// new segment; the daemon's own mapping of a tensor a client wrote). Best effort: on a kernel
// without them the faults simply come later. Stateless; any thread.
#ifndef TENSORBROKER_DAEMON_BASE_PAGE_POPULATION_H_
#define TENSORBROKER_DAEMON_BASE_PAGE_POPULATION_H_

#include <cstddef>

namespace tensorbroker::daemon {

// For a range about to be written (a shared mapping whose pages exist: fallocate).
void PopulateForWriting(void* data, size_t size);
// For a range about to be read.
void PopulateForReading(const void* data, size_t size);

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_BASE_PAGE_POPULATION_H_
