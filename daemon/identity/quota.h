// A user's limits on what they may hold in the broker: bytes and tensors (every version still
// in memory that the user created: published, pending, or kept alive by a lease). 0 means no
// limit. Values only.
#ifndef TENSORBROKER_DAEMON_QUOTA_H_
#define TENSORBROKER_DAEMON_QUOTA_H_

#include <cstdint>

namespace tensorbroker::daemon {

struct Quota {
  uint64_t bytes = 0;    // --quota-bytes
  uint64_t tensors = 0;  // --quota-tensors
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_QUOTA_H_
