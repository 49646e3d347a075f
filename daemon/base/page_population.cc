#include "daemon/base/page_population.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

namespace tensorbroker::daemon {
namespace {

void Populate(const void* data, size_t size, int advice) {
  if (size == 0) return;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t start = reinterpret_cast<uintptr_t>(data) & ~(page - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(data) + size;
  (void)::madvise(reinterpret_cast<void*>(start), end - start, advice);
}

}  // namespace

void PopulateForWriting(void* data, size_t size) { Populate(data, size, MADV_POPULATE_WRITE); }

void PopulateForReading(const void* data, size_t size) { Populate(data, size, MADV_POPULATE_READ); }

}  // namespace tensorbroker::daemon
