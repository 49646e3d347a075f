// The broker's state: published names, their tensor objects, pending (unsealed) tensors,
// client sessions and their leases, and the memory pools that back them (CPU shared memory
// first, then one per GPU served).
//
// Lifetime rule: a tensor object's memory is freed when no name points to it, it is not
// pending, and no lease remains. Delete and replace only unpublish; holders keep valid memory.
//
// Inputs are assumed validated for form (name, dtype, shape) by the caller; the store checks
// state (sessions, ownership, existence, capacity) and answers with the gRPC-style codes.
// Thread-safe: one mutex guards everything; Get may block waiting for a name.
#ifndef TENSORBROKER_DAEMON_TENSOR_STORE_H_
#define TENSORBROKER_DAEMON_TENSOR_STORE_H_

#include <dlpack/dlpack.h>

#include <cstdint>
#include <condition_variable>
#include <functional>
#include <map>
#include <optional>
#include <mutex>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/lease_table.h"
#include "daemon/memory_pool.h"
#include "common/unique_fd.h"
#include "tensorbroker/types.h"

namespace tensorbroker::daemon {

// A validated request to reserve a tensor.
struct TensorSpec {
  std::string name;
  DLDataType dtype{};
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // filled in
  uint64_t nbytes = 0;           // buffer size
  bool is_mutable = false;
  bool replace = false;
  DLDevice device{kDLCPU, 0};    // CUDA: the daemon's ordinal
  // The principal the tensor belongs to (the caller's uid). Create uses its session's uid.
  uint32_t owner_uid = 0;
};

// What the store reports about a tensor is the public tensorbroker::TensorInfo (types.h).
using ::tensorbroker::BrokerStats;
using ::tensorbroker::TensorInfo;

// A tensor, where its bytes are, and the lease the caller now holds on it.
struct TensorGrant {
  TensorInfo info;
  Block block;
  uint64_t lease_id = 0;
  bool writable = false;
};

// A Put in progress: bytes go to `data` (nbytes of them), then CommitPut or CancelPut.
struct PutTicket {
  uint64_t object_id = 0;
  uint8_t* data = nullptr;  // CUDA: a device pointer
  uint64_t nbytes = 0;
  DLDevice device{kDLCPU, 0};
};

// A Read in progress: the object stays alive until EndRead.
struct ReadTicket {
  TensorInfo info;
  const uint8_t* data = nullptr;  // CUDA: a device pointer
  uint64_t lease_id = 0;
};


// A lease's segment as a descriptor of its own, to hand to the lease's holder.
struct SegmentDescriptor {
  std::string segment;
  uint64_t size = 0;
  bool writable = false;
  UniqueFd fd;
};

// Answers a Get that waited (TensorStore::GetOrWait). Called with the store's lock held: must
// not call back into the store, and should only queue.
using GetCallback = std::function<void(absl::StatusOr<TensorGrant>)>;

// Receives events for one session. Called with the store's lock held: must not call back into
// the store, and should only queue.
class SessionEventSink {
 public:
  virtual ~SessionEventSink() = default;
  virtual void OnSegmentRemoved(const std::string& segment) = 0;
};

class TensorStore {
 public:
  explicit TensorStore(std::unique_ptr<MemoryPool> cpu_pool);
  // `pools` holds the CPU pool first, then at most one pool per other device.
  explicit TensorStore(std::vector<std::unique_ptr<MemoryPool>> pools);
  ~TensorStore();

  // Sessions. `sink` may be null; it must stay valid until CloseSession returns. `uid` is the
  // principal the session belongs to (the kernel's word for its connection), when known.
  std::string OpenSession(int32_t pid, const std::string& client_name, SessionEventSink* sink,
                          std::optional<uint32_t> uid = std::nullopt);
  // OK when `session_id` is open and may be used by a connection of `uid`: FAILED_PRECONDITION
  // for no such session, PERMISSION_DENIED for a session of another uid.
  absl::Status CheckSessionUser(const std::string& session_id, uint32_t uid) const;
  void UpdateSessionHello(const std::string& session_id, int32_t pid,
                          const std::string& client_name);
  // Releases the session's leases and aborts its pending tensors. Idempotent (a second call
  // reports nothing done).
  struct SessionCleanup {
    size_t leases_released = 0;
    size_t pending_aborted = 0;
  };
  SessionCleanup CloseSession(const std::string& session_id);

  absl::StatusOr<TensorGrant> Create(const std::string& session_id, const TensorSpec& spec);
  absl::StatusOr<TensorInfo> Seal(const std::string& session_id, const std::string& name);
  absl::Status Abort(const std::string& session_id, const std::string& name);

  absl::StatusOr<PutTicket> BeginPut(const TensorSpec& spec);
  absl::StatusOr<TensorInfo> CommitPut(uint64_t object_id);
  void CancelPut(uint64_t object_id);

  absl::StatusOr<ReadTicket> BeginRead(const std::string& name);
  void EndRead(uint64_t lease_id);

  // Waits until `deadline` (absl::InfinitePast(): do not wait) for `name` to be published.
  absl::StatusOr<TensorGrant> Get(const std::string& session_id, const std::string& name,
                                  absl::Time deadline);
  // The same without holding a thread: answers at once (returns the result), or, when `name` is
  // not published yet and `deadline` is in the future, returns nullopt, sets `*waiter_id` and
  // later calls `on_ready` exactly once (published, session closed, or shutting down) unless
  // CancelWait(*waiter_id) returned true first.
  std::optional<absl::StatusOr<TensorGrant>> GetOrWait(const std::string& session_id,
                                                        const std::string& name,
                                                        absl::Time deadline, uint64_t* waiter_id,
                                                        GetCallback on_ready);
  // Stops a wait; true when it was still waiting (its callback will never run).
  bool CancelWait(uint64_t waiter_id);
  absl::Status Release(const std::string& session_id, uint64_t lease_id);
  // A descriptor of the segment of the CPU tensor that `lease_id` (held by `session_id`) keeps
  // alive: read-write for the creator of a pending tensor and for a mutable one, else
  // read-only. FAILED_PRECONDITION for a CUDA tensor.
  absl::StatusOr<SegmentDescriptor> DescriptorFor(const std::string& session_id,
                                                  uint64_t lease_id);
  // A second lease of `session_id` on the object its lease `lease_id` keeps alive; writable
  // like the first (pending for its creator, or mutable).
  absl::StatusOr<TensorGrant> Retain(const std::string& session_id, uint64_t lease_id);

  absl::Status Delete(const std::string& name);
  std::vector<TensorInfo> List(const std::string& prefix);
  absl::StatusOr<TensorInfo> Stat(const std::string& name);
  BrokerStats Stats();

  // Wakes every waiting Get (they answer UNAVAILABLE) and refuses new work.
  void Shutdown();

 private:
  struct TensorObject {
    uint64_t id = 0;
    TensorSpec spec;
    Block block;
    std::string owner_session;  // creator while pending ("" for a Put)
    bool pending = false;       // created, not sealed, not aborted
    bool published = false;     // a name points here
    bool sealed = false;
    uint64_t version = 0;
    uint32_t leases = 0;
    int64_t created_unix_ms = 0;
  };
  struct Session {
    int32_t pid = 0;
    std::string client_name;
    SessionEventSink* sink = nullptr;
    std::optional<uint32_t> uid;
    std::set<std::string> pending_names;
  };
  struct Waiter {
    std::string session_id;
    std::string name;
    GetCallback on_ready;
  };
  // Leases taken by the daemon itself (Read streams) belong to this pseudo-session.
  static constexpr const char* kInternalSession = "";

  absl::Status CheckSession(const std::string& session_id) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::Status CheckServing() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::StatusOr<TensorObject*> ReserveLocked(const std::string& owner, const TensorSpec& spec)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<TensorObject*> FindPendingLocked(const std::string& session_id,
                                                  const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  TensorInfo PublishLocked(TensorObject* object) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropPendingLocked(TensorObject* object) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  TensorGrant GrantLocked(const std::string& session_id, TensorObject* object, bool writable)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A Get's answer now: a grant, or nullopt when `name` is not published.
  std::optional<absl::StatusOr<TensorGrant>> TryGetLocked(const std::string& session_id,
                                                          const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers every waiter for which `matches` is true with `answer(waiter)`.
  void AnswerWaitersLocked(const std::function<bool(const Waiter&)>& matches,
                           const std::function<absl::StatusOr<TensorGrant>(const Waiter&)>& answer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseLeaseOnLocked(uint64_t object_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees the object's memory if nothing refers to it any more.
  void MaybeFreeLocked(TensorObject* object) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The pool serving `device`; nullptr when none does.
  MemoryPool* PoolForLocked(DLDevice device) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void NotifySegmentsRemovedLocked(const std::vector<std::string>& segments)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  TensorInfo ViewLocked(const TensorObject& object) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  // std::mutex rather than absl::Mutex: Debian's Abseil is not built for ThreadSanitizer, so
  // TSan could not see absl::Mutex's happens-before edges; pthread-based locks it does see.
  mutable std::mutex mu_;
  std::condition_variable published_cv_;  // notified when a name is published or on shutdown
  std::vector<std::unique_ptr<MemoryPool>> pools_ ABSL_GUARDED_BY(mu_);  // CPU first
  std::map<uint64_t, std::unique_ptr<TensorObject>> objects_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, uint64_t> published_ ABSL_GUARDED_BY(mu_);  // name -> object
  std::map<std::string, uint64_t> pending_ ABSL_GUARDED_BY(mu_);    // name -> object
  std::map<std::string, Session> sessions_ ABSL_GUARDED_BY(mu_);
  LeaseTable leases_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, Waiter> waiters_ ABSL_GUARDED_BY(mu_);  // GetOrWait, by waiter id
  uint64_t next_waiter_id_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_object_id_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_version_ ABSL_GUARDED_BY(mu_) = 1;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_TENSOR_STORE_H_
