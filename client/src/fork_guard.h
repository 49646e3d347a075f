// fork() and the client. gRPC, which the client uses beside the local channel, does not survive
// fork(): a forked child shares the parent's polling set, so gRPC used in the child takes the
// parent's events and the parent's calls hang; the child has none of the parent's threads
// either, and the sockets it inherited are the parent's. So once this process has connected
// (NoteConnecting), its forked children may not connect (ConnectableHere says why and what to
// do instead), the clients they inherited refuse every call (UsableHere), and tearing those
// down is skipped: they are leaked, since their destructors would join threads the child does
// not have and shut sockets the parent still reads. Releases of inherited tensors and Close of
// inherited watchers do nothing there, taking no lock (another thread of the parent, say the
// release flusher, may have held it at the fork). A child forked before the first connect,
// or started with exec (multiprocessing's "spawn" and "forkserver"), connects as usual.
// Thread-safe.
#ifndef TENSORBROKER_CLIENT_SRC_FORK_GUARD_H_
#define TENSORBROKER_CLIENT_SRC_FORK_GUARD_H_

#include "absl/status/status.h"

namespace tensorbroker::client_internal {

// Called before a connection's first use of gRPC in this process.
void NoteConnecting();
// Whether this process is a fork() of one that had connected (then nothing inherited is used).
bool InForkedChild();
// FAILED_PRECONDITION in such a child, saying what to do instead; OK otherwise.
absl::Status ConnectableHere();
// FAILED_PRECONDITION in such a child (a client it inherited); OK otherwise.
absl::Status UsableHere();

}  // namespace tensorbroker::client_internal

#endif  // TENSORBROKER_CLIENT_SRC_FORK_GUARD_H_
