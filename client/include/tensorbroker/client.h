// tensorbroker client: publish tensors by name and get them back, in any process on this host,
// as DLPack tensors that point at the broker's shared memory (no copies).
//
//   auto client = tensorbroker::Client::Connect();            // default socket
//   if (!client.ok()) return client.status();
//   // Producer: reserve, fill in place, publish.
//   auto w = (*client)->Create("frames/0", {2, 3}, tensorbroker::dtypes::kFloat32);
//   float* p = static_cast<float*>((*w)->dl_tensor.data);  ... fill p ...
//   (*client)->Seal("frames/0");
//   (*w)->deleter(*w);                                        // the producer's lease ends
//   // Consumer (any process): the same physical pages, read-only.
//   auto t = (*client)->Get("frames/0", std::chrono::seconds(5));
//   ... use (*t)->dl_tensor ...;  (*t)->deleter(*t);           // releases this lease
//
// CUDA: Create with `device = {kDLCUDA, n}` reserves device memory the daemon owns; Get returns
// a kDLCUDA tensor on the consumer's own ordinal of that GPU (named across processes by UUID),
// through a CUDA IPC handle opened once per slab and process. Seal first waits for the
// producer's CUDA work (SealOptions). A CPU tensor can be mapped page-locked (`pinned`): it then
// reports kDLCUDAHost and copies to the GPU asynchronously.
//
// Ownership: every tensor returned (Create, Get, GetLegacy, Retain) is owned by the caller, who
// must call its deleter exactly once. A Client holds one broker lease per tensor version and
// every tensor it returns for that version shares it; the deleter of the last one releases it
// (queued and sent batched, never waited for; the Client's next call sees it done). Deleters
// may run on any thread, also after the Client is destroyed: a tensor stays valid until its
// deleter runs. `tensorbroker::TensorPtr` does that for you.
// Transport: Get, Create, Seal, Abort and releases use the local channel (`<socket>.fd`, memory
// arrives there as descriptors); the other calls use gRPC.
//
// Restarts: a Client rides through a restart of its daemon (ConnectOptions::reconnect_timeout).
// Tensors it holds stay valid: their pages never go away.
// Threading: a Client is safe to use from many threads at once.
// fork(): a Client does not cross it, and a process forked from one that has connected may not
// connect (gRPC does not survive fork(): the child would take the parent's events). There,
// Connect and every call of an inherited Client or Watcher answer FAILED_PRECONDITION, and
// destroying them leaves the parent's connections alone. Connect in processes started with
// exec, or forked before the first Connect.
// Errors: fallible calls return absl::Status / absl::StatusOr with the gRPC codes the daemon
// answered with (NOT_FOUND, ALREADY_EXISTS, INVALID_ARGUMENT, RESOURCE_EXHAUSTED, ...).
#ifndef TENSORBROKER_CLIENT_H_
#define TENSORBROKER_CLIENT_H_

#include <dlpack/dlpack.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tensorbroker/export.h"
#include "tensorbroker/types.h"

namespace tensorbroker {

namespace client_internal {
class CancelScope;
}  // namespace client_internal

// Cancels waiting Gets from any thread (GetOptions::cancel). Cancel() may come before, during
// or after a Get: once it is cancelled, every Get given this token returns CANCELLED at once,
// leaving no waiter in the daemon (it is told over the local channel) and no lease in this
// process (a tensor granted meanwhile is released). One token may serve many Gets; it cannot
// be reset. Thread-safe.
class TENSORBROKER_EXPORT GetCancellation {
 public:
  GetCancellation() = default;
  GetCancellation(const GetCancellation&) = delete;
  GetCancellation& operator=(const GetCancellation&) = delete;

  void Cancel();
  bool cancelled() const;

 private:
  friend class client_internal::CancelScope;
  mutable std::mutex mu_;
  bool cancelled_ = false;                           // guarded by mu_
  uint64_t next_hook_ = 0;                           // guarded by mu_
  std::map<uint64_t, std::function<void()>> hooks_;  // guarded by mu_: Gets on the wire
};

struct CreateOptions {
  // Stays writable for every holder after Seal; writes are seen by all holders.
  bool is_mutable = false;
  // On Seal, a name already published moves to the new version (old holders keep theirs).
  bool replace = false;
  // Optional layout in elements (non-negative); empty means compact C order.
  std::vector<int64_t> strides;
  // Where the bytes live: CPU shared memory ({kDLCPU, 0}, the default) or device memory of
  // {kDLCUDA, n}, n an ordinal in this process. {kDLCUDAHost, 0} means CPU, pinned.
  DLDevice device{kDLCPU, 0};
  // CPU tensors: map this (the producer's) tensor page-locked for CUDA; it reports kDLCUDAHost.
  bool pinned = false;
  // Who may read it besides its owner (this process's uid) and the daemon's administrators:
  // "uid:N", "gid:N", "user:NAME", "group:NAME", "peer:NAME" (another broker, by its TLS
  // certificate) or "*" (anyone who may connect). Empty: the
  // daemon's default for the name. To anyone else the tensor does not exist (NOT_FOUND).
  std::vector<std::string> readers;
  // How many versions of the name stay readable by number (GetOptions::version) once this one
  // is sealed: this one and up to keep - 1 before it. Older ones are unpublished as newer
  // arrive (holders keep theirs). 1: only the current one. At most 1024.
  uint32_t keep = 1;
  // Deleted by the daemon when this Client's session ends (it is destroyed, or the process
  // dies), if it is still the name's current version then; never kept across a daemon restart.
  // For presence records (a stream reader's seat, StreamReader).
  bool ephemeral = false;
};

struct PutOptions {
  bool is_mutable = false;
  bool replace = false;
  uint32_t keep = 1;  // as CreateOptions::keep
  // Where the broker stores the copy. Unset: where the source is (the same GPU for a kDLCUDA
  // tensor, else CPU).
  std::optional<DLDevice> device;
  // As CreateOptions::readers.
  std::vector<std::string> readers;
};

struct GetOptions {
  // Wait up to this long for the name to be published (0: do not wait; NOT_FOUND at once).
  std::chrono::milliseconds timeout{0};
  // CPU tensors: map page-locked for CUDA (cudaHostRegister, once per segment and process; the
  // tensor reports kDLCUDAHost). INVALID_ARGUMENT for a CUDA tensor, FAILED_PRECONDITION
  // without a usable GPU. Page-locked memory counts against the memlock limit
  // (docs/architecture.md, "CUDA tensors").
  bool pinned = false;
  // Where the caller needs the tensor ({kDLCUDA, n}: this process's ordinal; {kDLCPU, 0}).
  // Get never copies: FAILED_PRECONDITION naming where it is when that is elsewhere (the lease
  // is released). Unset: wherever it is.
  std::optional<DLDevice> device;
  // Cancels the wait from another thread (GetCancellation). Null: the wait ends only when the
  // name is published or `timeout` runs out.
  std::shared_ptr<GetCancellation> cancel;
  // Nonzero: exactly this version, if the name still keeps it (CreateOptions::keep); NOT_FOUND
  // at once otherwise (`timeout` does not apply). Not with after_version.
  uint64_t version = 0;
  // Only a version newer than this: the current one if it is newer, else wait (`timeout`) for
  // the next publication. To follow a stream, pass the version of the last one you read
  // (Describe(tensor).version); versions are daemon-wide, increasing, not consecutive.
  std::optional<uint64_t> after_version;
  // With after_version: the oldest kept version newer than after_version instead of the
  // current one, to step through every version the name's history still keeps.
  bool oldest = false;
  // Answer from this process's directory and mappings alone, never with a message to the
  // daemon (a control loop that must not wait on another process): FAILED_PRECONDITION when
  // the answer needs one (no fast reads, the name not in the directory, its current version in
  // a segment this process does not map yet, a pinned Get). Not with version or oldest.
  bool no_round_trip = false;
};

struct SealOptions {
  // CUDA tensors: the stream (a cudaStream_t's value; 0 = the legacy default stream) the
  // producer wrote the tensor on. Seal waits for that stream's work before publishing, so a
  // consumer never sees the tensor before the writes are done. Unset: Seal waits for all work on
  // the tensor's device (cudaDeviceSynchronize): always correct, but slower.
  std::optional<uintptr_t> cuda_stream;
};

struct WatchOptions {
  // Events with a sequence after this one (what the daemon still remembers of them first; a
  // gap is one kLost event). Unset: only what happens from now on. To resume a watch, pass the
  // last sequence seen (Watcher::last_sequence()).
  std::optional<uint64_t> after_version;
};

// A Watch stream (Client::Watch): the events under its prefix that this client's uid may read,
// in sequence order, on a connection of its own to the daemon. The daemon sends them as Next
// takes them: a watcher that stops reading costs the daemon nothing, falls behind its log, and
// gets one kLost event when it reads again. If the daemon restarts, the watcher reconnects
// (within ConnectOptions::reconnect_timeout) and goes on after a kLost event for what it could
// not see meanwhile.
// Next is for one thread at a time; Close may be called from any thread.
class TENSORBROKER_EXPORT Watcher {
 public:
  virtual ~Watcher() = default;
  // The next event, or nullopt when `timeout` passed first (a negative timeout waits forever).
  // CANCELLED once closed; UNAVAILABLE when the daemon went away and none came back in time.
  virtual absl::StatusOr<std::optional<WatchEvent>> Next(std::chrono::milliseconds timeout) = 0;
  // Ends the watch and wakes a Next waiting in another thread (which returns CANCELLED).
  virtual void Close() = 0;
  // The sequence of the last event Next returned (0: none yet).
  virtual uint64_t last_sequence() const = 0;
};

// This process's mappings of broker memory, for leak checks and monitoring.
struct ProcessMappings {
  size_t cached_segments = 0;  // shared-memory segment mappings kept for reuse
  size_t open_cuda_slabs = 0;  // CUDA IPC handles open (closed with the slab's last tensor)
  // CUDA VMM slabs whose descriptor or mappings are kept for reuse (until the daemon frees the
  // slab; tensors still held keep their own mapping).
  size_t cached_cuda_slabs = 0;
  size_t pinned_segments = 0;  // segment mappings page-locked (cudaHostRegister)
};
TENSORBROKER_EXPORT ProcessMappings CurrentProcessMappings();

// Calls the tensor's deleter on destruction.
struct TensorDeleter {
  void operator()(DLManagedTensorVersioned* t) const {
    if (t != nullptr && t->deleter != nullptr) t->deleter(t);
  }
};
using TensorPtr = std::unique_ptr<DLManagedTensorVersioned, TensorDeleter>;

struct ConnectOptions {
  // Empty: DefaultSocketPath().
  std::string socket_path;
  // How long Connect waits for a daemon to answer (UNAVAILABLE after that).
  std::chrono::milliseconds timeout{std::chrono::seconds(5)};
  // When the daemon goes away (a restart, an upgrade, a crash, a --takeover), the call that
  // finds it gone waits up to this long for it to answer again, reconnects, leases again the
  // tensors this client holds that came back with it, and is made once more (Seal excepted: a
  // tensor not yet sealed does not survive). 0: such calls fail with UNAVAILABLE.
  std::chrono::milliseconds reconnect_timeout{std::chrono::seconds(30)};
  // Reads without a round trip (docs/architecture.md, "Reads without a round trip"): the
  // client maps its uid's directory of current versions and a lease table of its own, so that
  // LatestVersion is a read of shared memory and a Get of a current version in a segment this
  // process maps already asks nothing of the daemon. false: every Get and check is a call.
  bool fast_reads = true;
};

// The socket a client uses when none is given, the daemon's default too:
// $TENSORBROKER_SOCKET, else /run/tensorbroker/broker.sock for root, else
// $XDG_RUNTIME_DIR/tensorbroker/broker.sock, else /tmp/tensorbroker-$UID/broker.sock.
TENSORBROKER_EXPORT std::string DefaultSocketPath();

class TENSORBROKER_EXPORT Client {
 public:
  // Connects to the daemon at `socket_path` (empty: DefaultSocketPath()) and opens a session.
  // UNAVAILABLE if no daemon answers within `timeout`.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(
      const std::string& socket_path = "",
      std::chrono::milliseconds timeout = std::chrono::seconds(5));
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const ConnectOptions& options);

  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Reserves a writable tensor of `shape` and `dtype` (256-byte aligned, zero-filled pages are
  // not guaranteed) that no one else sees until Seal(name).
  absl::StatusOr<DLManagedTensorVersioned*> Create(const std::string& name,
                                                   const std::vector<int64_t>& shape,
                                                   DLDataType dtype,
                                                   const CreateOptions& options = {});
  // Publishes the tensor this client created under `name`. Unless it was created mutable, it is
  // read-only from now on, also for this client: do not write through the Create tensor.
  // For a CUDA tensor, first waits for the producer's writes (see SealOptions).
  absl::StatusOr<TensorInfo> Seal(const std::string& name, const SealOptions& options = {});
  // Drops a tensor this client created and has not sealed.
  absl::Status Abort(const std::string& name);

  // Copies a CPU, pinned or CUDA tensor (any strides, any byte_offset) into the broker's CPU or
  // CUDA memory (PutOptions::device), stored compact, and publishes it: one copy. A CUDA source
  // is read on the legacy default stream of its device: work the producer queued on other
  // streams must be complete or ordered before it.
  absl::StatusOr<TensorInfo> Put(const std::string& name, const DLTensor& tensor,
                                 const PutOptions& options = {});

  // Returns the tensor published under `name`, waiting up to `timeout` for it to appear
  // (0: do not wait; NOT_FOUND at once). Read-only unless the tensor is mutable
  // (DLPACK_FLAG_BITMASK_READ_ONLY is set then, and the pages are mapped read-only).
  absl::StatusOr<DLManagedTensorVersioned*> Get(
      const std::string& name, std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  absl::StatusOr<DLManagedTensorVersioned*> Get(const std::string& name, const GetOptions& options);
  // The same for consumers still on the pre-1.0 DLPack ABI.
  absl::StatusOr<DLManagedTensor*> GetLegacy(
      const std::string& name, std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

  // Another handle on the tensor `tensor` refers to, sharing this client's lease (local: no
  // round trip): the same memory and version even if the name was since replaced or deleted,
  // writable if `tensor` is. For handing one tensor to several consumers that each call their
  // own deleter; the lease ends with the last of them.
  // `tensor` must come from this Client (Create, Get or Retain) and still be alive;
  // INVALID_ARGUMENT otherwise.
  absl::StatusOr<DLManagedTensorVersioned*> Retain(const DLManagedTensorVersioned& tensor);
  // What the broker said about `tensor` when it granted it: name, version, mutable, ...
  // (`leases` as of then). No round trip. Of a tensor a Get took from the directory (no round
  // trip), what the directory records: readers, origin and leases are left empty (Stat). The same
  // INVALID_ARGUMENT cases as Retain.
  absl::StatusOr<TensorInfo> Describe(const DLManagedTensorVersioned& tensor) const;
  // The same, without a copy: the description every handle Retain made of the tensor shares;
  // it stays valid after they are released (for wrappers that keep a tensor's name and shape
  // beyond its lease).
  absl::StatusOr<std::shared_ptr<const TensorInfo>> DescribeShared(
      const DLManagedTensorVersioned& tensor) const;

  // Unpublishes `name`: for its owner (the uid that first published it) or an administrator;
  // PERMISSION_DENIED for anyone else who may read it.
  absl::Status Delete(const std::string& name);
  // Every tensor under `prefix` this process's uid may read, in name order (the daemon answers
  // a page at a time; this follows the pages).
  absl::StatusOr<std::vector<TensorInfo>> List(const std::string& prefix = "");
  absl::StatusOr<TensorInfo> Stat(const std::string& name);
  // The current version of `name`: a read of this uid's directory in shared memory, no call
  // (ConnectOptions::fast_reads; a Stat when the directory cannot say). NOT_FOUND when `name` is
  // not published, or is but this uid may not read it (as Stat).
  absl::StatusOr<uint64_t> LatestVersion(const std::string& name);
  // Whether the current version of `name` is another than `version` (LatestVersion's errors).
  absl::StatusOr<bool> ChangedSince(const std::string& name, uint64_t version);
  // Whether this client reads its uid's directory (ConnectOptions::fast_reads, and a daemon
  // that offers it): LatestVersion then asks nothing of the daemon but in rare cases (a
  // directory that overflowed), and a Get of a current version in a mapped segment neither.
  bool fast_reads() const;
  // Pools, counters, methods, and what each user holds (every user for an administrator, else
  // this process's uid alone).
  absl::StatusOr<BrokerStats> Stats();
  // Watches every publication, replacement, deletion and expiry under `prefix` (Watcher).
  // Returns once the daemon has registered the watch: every event after that reaches it.
  // INVALID_ARGUMENT for a prefix no name could start with.
  absl::StatusOr<std::unique_ptr<Watcher>> Watch(const std::string& prefix,
                                                 const WatchOptions& options = {});
  // An empty round trip to the daemon.
  absl::Status Ping();

  const std::string& socket_path() const;

  class Impl;

 private:
  explicit Client(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace tensorbroker

#endif  // TENSORBROKER_CLIENT_H_
