// How a Python object lets go of its reference to a client's lease: with the GIL kept when
// that is local, without it when it may block. A lease of CPU memory got by get(), dropped
// while its Client is alive, is a store into the process's lease table or a release queued
// for the next message (at most a wait for the channel's send lock while another thread
// writes a message, never for an answer): keeping the GIL saves two hand-overs of it per
// tensor. Anything else may block: the last reference of a closed
// client ends its session (a round trip), a CUDA lease first waits for its device, an
// unsealed create() is aborted, a stream's frame goes back to its ring.
//
// The Client may be dropped by another thread (close() without the GIL) between the check
// and the drop; the drop then ends the session with the GIL held: one round trip's wait for
// the other Python threads, never a deadlock (nothing in it calls Python).
//
// Threading: copied freely; Run may be called from any thread, with or without the GIL.
#ifndef TENSORBROKER_PYTHON_SRC_LEASE_DROP_H_
#define TENSORBROKER_PYTHON_SRC_LEASE_DROP_H_

#include <dlpack/dlpack.h>

#include <memory>
#include <utility>

#include "python/src/status_error.h"
#include "tensorbroker/client.h"

namespace tensorbroker::python {

class LeaseDrop {
 public:
  // Always without the GIL: for leases whose drop may block.
  LeaseDrop() = default;
  // A lease `client` got (not created) in memory of `device`.
  LeaseDrop(const std::shared_ptr<Client>& client, DLDevice device)
      : client_(client), cpu_(device.device_type == kDLCPU) {}

  // Runs `drop` (which may destroy this LeaseDrop's owner: nothing of it is read afterwards).
  template <typename Drop>
  void Run(Drop&& drop) const {
    if (cpu_ && !client_.expired()) {
      drop();
      return;
    }
    RunWithoutGil(std::forward<Drop>(drop));
  }

 private:
  std::weak_ptr<Client> client_;
  bool cpu_ = false;
};

}  // namespace tensorbroker::python

#endif  // TENSORBROKER_PYTHON_SRC_LEASE_DROP_H_
