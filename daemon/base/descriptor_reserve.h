// The descriptors the daemon keeps for its own work: accepting its own uid's connections (its
// health check, the watchdog's ping), adopting tensors and the descriptor store, takeovers. No
// other user's connection is admitted and no other user's tensor is made once fewer than
// `kDescriptorReserve` of the RLIMIT_NOFILE limit are free (RESOURCE_EXHAUSTED, or the
// connection closed at once), so one user's tensors or connections cannot keep the daemon from
// answering its own health check.
//
// The check asks the kernel for the lowest free descriptor (dup, then close): every descriptor
// below it is in use, so the daemon is short when it is within the reserve of the limit.
// Stateless; thread-safe.
#ifndef TENSORBROKER_DAEMON_DESCRIPTOR_RESERVE_H_
#define TENSORBROKER_DAEMON_DESCRIPTOR_RESERVE_H_

#include <cstddef>

#include "absl/status/status.h"

namespace tensorbroker::daemon {

inline constexpr size_t kDescriptorReserve = 256;

// Whether a descriptor is free below the limit less `reserve`.
bool DescriptorsToSpare(size_t reserve = kDescriptorReserve);

// OK, or RESOURCE_EXHAUSTED saying that `what` (e.g. "create") waits for descriptors.
absl::Status CheckDescriptorsToSpare(const char* what, size_t reserve = kDescriptorReserve);

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_DESCRIPTOR_RESERVE_H_
