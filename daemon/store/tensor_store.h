// The broker's state: published names, their tensor objects, pending (unsealed) tensors,
// client sessions and their leases, and the memory pools that back them (CPU shared memory
// first, then one per GPU served).
//
// Lifetime rule: a tensor object's memory is freed when no name points to it, it is not
// pending, and no lease remains. Delete and replace only unpublish; holders keep valid memory.
//
// Tenancy: every call names its principal (a session's, or the caller's for the calls without
// one). A name belongs to the uid that first published it: replace and Delete are for that uid
// or an administrator. A tensor is visible (Get, Stat, List, Read, waits) only to its owner,
// its readers and administrators; to anyone else it does not exist (NOT_FOUND). A version an
// administrator publishes over another user's name has the name's owner among its readers.
// Each uid's bytes and tensors are counted against its quota.
//
// Inputs are assumed validated for form (name, dtype, shape, readers) by the caller; the store
// checks state (sessions, ownership, visibility, existence, capacity, quotas) and answers with
// the gRPC-style codes.
// Thread-safe: one mutex guards everything. The state lives in small parts that have no lock of
// their own and are guarded by it (sessions: session_table.h, names: name_index.h, waiting Gets:
// wait_list.h, usage and per-uid counts: quota_ledger.h, leases: lease_table.h); the store keeps
// the tensor objects, the pools, and the decisions that span parts. Callbacks (GetCallback, a
// Put's expiry) run after the mutex is released, on the thread of the call that caused them; they
// may call the store.
#ifndef TENSORBROKER_DAEMON_TENSOR_STORE_H_
#define TENSORBROKER_DAEMON_TENSOR_STORE_H_

#include <dlpack/dlpack.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "common/unique_fd.h"
#include "daemon/identity/principal.h"
#include "daemon/identity/principal_set.h"
#include "daemon/identity/quota.h"
#include "daemon/memory/memory_pool.h"
#include "daemon/store/lease_slot_tables.h"
#include "daemon/store/lease_table.h"
#include "daemon/store/name_index.h"
#include "daemon/store/principal_directories.h"
#include "daemon/store/quota_ledger.h"
#include "daemon/store/remote_names.h"
#include "daemon/store/session_table.h"
#include "daemon/store/store_types.h"
#include "daemon/store/tensor_journal.h"
#include "daemon/store/wait_list.h"
#include "daemon/store/watch_hub.h"

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
  DLDevice device{kDLCPU, 0};  // CUDA: the daemon's ordinal
  // The principal the tensor belongs to (the caller's uid). Create uses its session's uid.
  uint32_t owner_uid = 0;
  PrincipalSet readers = PrincipalSet::Anyone();  // besides the owner and administrators
  // Versions of the name that stay readable by number once this one is published (>= 1).
  uint32_t keep = 1;
  // Deleted when the creating session ends, if still the current version; never journaled.
  bool ephemeral = false;
  // Set: a replica of another broker's tensor (BeginReplica): charged to no user's quota, never
  // journaled (a restart drops it; it is fetched again when asked for).
  std::optional<ReplicaOrigin> origin;
};

// Whether `principal` may read a version made with `spec`: an administrator, its owner, or one of
// its readers.
bool SpecAllows(const Principal& principal, const TensorSpec& spec);

// Fetches in flight (replicas' memory not yet published) hold at most this part of a pool:
// 1/kFetchShareDivisor of its capacity.
inline constexpr uint64_t kFetchShareDivisor = 2;

// The most versions one name may keep (TensorSpec::keep).
inline constexpr uint32_t kMaxKeep = 1024;

// What one uid may have the daemon hold for it at once, whatever its number of connections
// (RESOURCE_EXHAUSTED past them): waiting Gets, Watch streams, and Read streams (each holds one
// chunk of at most 1 MiB while its client is slow to read).
inline constexpr size_t kMaxWaitingGetsPerUid = 16384;
inline constexpr size_t kMaxWatchesPerUid = 1024;
inline constexpr size_t kMaxReadsPerUid = 64;

// Which version of a name a Get asks for.
struct VersionWanted {
  uint64_t version = 0;                   // nonzero: exactly this kept version (never waits)
  std::optional<uint64_t> after_version;  // only a version newer than this (waits for one)
  bool oldest = false;  // with after_version: the oldest kept one newer than it, not the current
};

// How a tensor's block is kept in a pool: its kind, and the key of the tensors it may share a
// segment with (the same owner and the same readers: a reader's descriptor reaches the whole
// segment).
inline BlockKind BlockKindOf(const TensorSpec& spec) {
  return spec.is_mutable ? BlockKind::kMutable : BlockKind::kImmutable;
}
std::string SharingKeyOf(const TensorSpec& spec);

// How the store behaves, fixed for its life.
struct StoreOptions {
  // A Create not sealed, or a Put not finished, this long after it began is aborted by
  // ExpirePending and its name freed.
  absl::Duration pending_timeout = absl::Seconds(60);
  // Each uid's quota; null: no quotas.
  std::function<Quota(uint32_t uid)> quota_for;
  // Whether a tensor or a lease table of a caller who is no administrator may be made now: OK,
  // or why not naming `what` (descriptor_reserve.h: the daemon keeps descriptors for its own
  // work). Null: always.
  std::function<absl::Status(const char* what)> descriptors_to_spare;
  // The lease tables (reads without a round trip) one uid that is no administrator may have at
  // once: --max-lease-tables-per-uid.
  size_t max_lease_tables_per_uid = kDefaultLeaseTablesPerUid;
  // Told of each CPU tensor version published and unpublished (tensor_journal.h); may be
  // null. Must outlive the store.
  TensorJournal* journal = nullptr;
  // The first version (and event sequence) the store hands out; adoption raises it past every
  // adopted version. The daemon seeds it from the clock so versions keep increasing across
  // restarts (DaemonRunner); 1 in tests.
  uint64_t first_version = 1;
  // Events kept for Watch streams (the newest; a watcher that falls further behind, or resumes
  // from before them, gets one kLost event).
  size_t watch_log = 16384;
  // The names other brokers serve (remote_names.h); null: none. Must outlive the store.
  RemoteNames* remote = nullptr;
};

// One page of List.
struct ListPage {
  std::vector<TensorView> tensors;
  std::string next_page_token;  // empty: this was the last page
};

// A tensor, where its bytes are, and the lease the caller now holds on it.
struct TensorGrant {
  TensorView info;
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
  uint64_t lease_id = 0;  // the Put's own lease: `data` stays valid until CommitPut/CancelPut
};

// A Read in progress: the object stays alive until EndRead.
struct ReadTicket {
  TensorView info;
  const uint8_t* data = nullptr;  // CUDA: a device pointer
  uint64_t lease_id = 0;
};

// A lease's segment as a descriptor of its own, to hand to the lease's holder.
struct SegmentDescriptor {
  std::string segment;
  uint64_t size = 0;
  bool writable = false;
  DLDevice device{kDLCPU, 0};  // CUDA: a VMM slab's descriptor
  UniqueFd fd;
};

// The two files of a session's reads without a round trip (issue 34).
enum class FastReadFile {
  kDirectory,   // its principal's directory, read-only (principal_directories.h)
  kLeaseTable,  // its own lease table, read-write (lease_slot_tables.h)
};

// DEADLINE_EXCEEDED for a Get of `name` whose wait for `wanted` ran out.
absl::Status WaitRanOut(const std::string& name, const VersionWanted& wanted);

// GetCallback (wait_list.h) answers a Get that waited; SessionEventSink (session_table.h)
// receives a session's events.

class TensorStore {
 public:
  explicit TensorStore(std::unique_ptr<MemoryPool> cpu_pool, StoreOptions options = {});
  // `pools` holds the CPU pool first, then at most one pool per other device.
  explicit TensorStore(std::vector<std::unique_ptr<MemoryPool>> pools, StoreOptions options = {});
  ~TensorStore();

  // Sessions. `sink` may be null; it must stay valid until CloseSession returns. The session
  // belongs to `principal` (the kernel's word for the connection that opened it).
  std::string OpenSession(const Principal& principal, int32_t pid, const std::string& client_name,
                          SessionEventSink* sink);
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
  absl::StatusOr<TensorView> Seal(const std::string& session_id, const std::string& name);
  absl::Status Abort(const std::string& session_id, const std::string& name);

  // A Put by `caller`: `on_expired` (may be empty) runs if the pending timeout aborts it first;
  // the ticket's bytes stay valid until CommitPut or CancelPut all the same.
  absl::StatusOr<PutTicket> BeginPut(const Principal& caller, const TensorSpec& spec,
                                     std::function<void()> on_expired = {});
  // DEADLINE_EXCEEDED when the pending timeout aborted it.
  absl::StatusOr<TensorView> CommitPut(const PutTicket& ticket);
  void CancelPut(const PutTicket& ticket);

  // Memory for a replica of a peer's tensor (`spec.origin` set, CPU, immutable; its owner and
  // readers the origin's), to be filled and published with CommitPut (or dropped with
  // CancelPut) like a Put's. It counts against the pool's capacity, not against any user's
  // quota. ALREADY_EXISTS when the name is pending, holds a tensor published here (not a
  // replica), or a replica of the same or a newer origin version; a newer one replaces it.
  absl::StatusOr<PutTicket> BeginReplica(const TensorSpec& spec);
  // The replicas held whose names start with `prefix` and that broker `target` sent
  // (ReplicaOrigin::target): name -> origin version.
  std::map<std::string, uint64_t> ReplicasFrom(absl::string_view prefix,
                                               absl::string_view target) const;
  // The origin version of replica `name` if broker `target` sent it; nullopt otherwise.
  std::optional<uint64_t> ReplicaVersion(const std::string& name, absl::string_view target) const;
  // Unpublishes replica `name` (its origin deleted it, or no longer has it) if broker `target`
  // sent it and it holds origin version `up_to` or older: its holders keep their leases,
  // watchers see it deleted, the log says `why`. Only the origin a replica came from may drop
  // it: kFromAnotherOrigin (nothing done) is that peer speaking of what is not its own.
  enum class ReplicaDrop { kDropped, kNotHeld, kNewerHeld, kFromAnotherOrigin };
  ReplicaDrop DropReplica(const std::string& name, uint64_t up_to, absl::string_view target,
                          const std::string& why);

  // RESOURCE_EXHAUSTED when `caller`'s uid has kMaxReadsPerUid reads in progress.
  absl::StatusOr<ReadTicket> BeginRead(const Principal& caller, const std::string& name);
  void EndRead(uint64_t lease_id);

  // Waits until `deadline` (absl::InfinitePast(): do not wait) for `name` to be published
  // (holding the calling thread: for in-process callers; the servers use GetOrWait).
  absl::StatusOr<TensorGrant> Get(const std::string& session_id, const std::string& name,
                                  absl::Time deadline, const VersionWanted& wanted = {});
  // The same without holding a thread: answers at once (returns the result), or, when `name` is
  // not published (or not visible to the session, or not newer than wanted.after_version) yet
  // and `deadline` is in the future, returns nullopt, sets `*waiter_id` and later calls
  // `on_ready` exactly once (published, session closed, or shutting down) unless
  // CancelWait(*waiter_id) returned true first. The caller times the wait out with CancelWait.
  // INVALID_ARGUMENT for a version with an after_version, or oldest without after_version;
  // RESOURCE_EXHAUSTED when the session's uid has kMaxWaitingGetsPerUid waiting already.
  // A name a peer serves (StoreOptions::remote) of which this store holds no version: a fetch
  // is asked for and, when `wait_until` is given and the Get would not wait (`deadline` past),
  // it waits kRemoteFetchWait for the fetch alone (its end written there: the caller times the
  // wait out then, not at `deadline`); a replica it may not read answers it NOT_FOUND.
  std::optional<absl::StatusOr<TensorGrant>> GetOrWait(const std::string& session_id,
                                                       const std::string& name,
                                                       const VersionWanted& wanted,
                                                       absl::Time deadline, uint64_t* waiter_id,
                                                       GetCallback on_ready,
                                                       absl::Time* wait_until = nullptr);
  // A fetch of `name` from a peer failed with `status`: the Gets that wait for the fetch alone
  // get it; unless it is NOT_FOUND (the peer has no such tensor: a Get with a wait of its own
  // waits on), every Get waiting for `name` does. Nothing is published.
  void FailFetch(const std::string& name, const absl::Status& status);
  // Stops a wait; true when it was still waiting (its callback will never run).
  bool CancelWait(uint64_t waiter_id);
  // NOT_FOUND for a lease that is not this session's, whether or not it exists.
  absl::Status Release(const std::string& session_id, uint64_t lease_id);
  // A descriptor of the segment of the CPU tensor that `lease_id` (held by `session_id`) keeps
  // alive: read-write for the creator of a pending tensor and for a mutable one, else
  // read-only. FAILED_PRECONDITION for a CUDA tensor.
  absl::StatusOr<SegmentDescriptor> DescriptorFor(const std::string& session_id, uint64_t lease_id);
  // The same without the descriptor (fd left invalid): what DescriptorFor would hand over, to
  // check a request before its reply duplicates the descriptor.
  absl::StatusOr<SegmentDescriptor> DescribeSegment(const std::string& session_id,
                                                    uint64_t lease_id);
  // A second lease of `session_id` on the object its lease `lease_id` keeps alive; writable
  // like the first (pending for its creator, or mutable).
  absl::StatusOr<TensorGrant> Retain(const std::string& session_id, uint64_t lease_id);

  // Reads without a round trip (issue 34; docs/architecture.md): makes (first call) the
  // directory of the session's principal and the session's lease table. Both live as long as
  // the session (the directory as long as any session of the principal).
  // RESOURCE_EXHAUSTED when memory cannot hold them.
  absl::Status OpenFastReads(const std::string& session_id);
  // A descriptor of one of them (duplicated now), to hand to the session's process;
  // FAILED_PRECONDITION when OpenFastReads has not made it (or the session ended).
  absl::StatusOr<SegmentDescriptor> FastReadDescriptor(const std::string& session_id,
                                                       FastReadFile which);

  // Unpublishes `name`: for its owner or an administrator.
  absl::Status Delete(const Principal& caller, const std::string& name);
  // The tensors under `prefix` that `caller` may see, in name order, at most `page_size`
  // (>= 1) of them after `page_token` (a name from the previous page's next_page_token).
  ListPage List(const Principal& caller, const std::string& prefix, size_t page_size,
                const std::string& page_token = "");
  absl::StatusOr<TensorView> Stat(const Principal& caller, const std::string& name);
  // Pools and counters; `tensors` counts the names `caller` may see, and `users` holds every
  // user for an administrator, else the caller alone.
  StoreStats Stats(const Principal& caller);
  // Lease tables scanned since the start (LeaseSlotTables::table_scans): what keeping lease
  // tables costs the daemon, which tests bound.
  uint64_t LeaseTableScans() const;

  // Watch streams (watch_hub.h): every publication, replacement, deletion and expiry of a
  // version `caller` may read under `prefix`, in sequence order, from after `after_version`
  // (unset: from now on). `wake` runs (on whichever thread appended, without the store's lock)
  // once the parked watcher has events again; it may run after Unwatch. Returns its id;
  // RESOURCE_EXHAUSTED when `caller`'s uid has kMaxWatchesPerUid watches already.
  absl::StatusOr<uint64_t> Watch(const Principal& caller, std::string prefix,
                                 std::optional<uint64_t> after_version, std::function<void()> wake);
  // Up to `max` events for watcher `watcher_id` (WatchHub::Take): parks it when none is left.
  // UNAVAILABLE once shutting down. Never waits.
  absl::StatusOr<std::vector<StoreEvent>> TakeEvents(uint64_t watcher_id, size_t max);
  void Unwatch(uint64_t watcher_id);

  // Aborts what has been pending longer than the pending timeout at `now` (Creates not sealed,
  // Puts not finished): their names are free again. Returns how many; logs each.
  size_t ExpirePending(absl::Time now);

  // Wakes every waiting Get (they answer UNAVAILABLE) and refuses new work.
  void Shutdown();

  // A tensor a previous instance published, taken back before serving (adoption.h).
  struct AdoptedTensor {
    TensorSpec spec;          // owner_uid: who published this version (their quota)
    uint32_t name_owner = 0;  // the uid the name belongs to
    uint64_t version = 0;
    int64_t created_unix_ms = 0;
    Block block;  // from its pool's AdoptBlock
  };
  // Publishes it as it was; versions published later are higher than every adopted one. Not
  // told to the journal: its record is kept already. ALREADY_EXISTS when the name is taken.
  absl::Status AdoptPublished(AdoptedTensor tensor);
  // Memory adopted from the previous instance may be reused from now on (MemoryPool::
  // EndAdoptionGrace): called once clients have had the time to reconnect and lease again.
  void EndAdoptionGrace();
  // Replays the state a successor adopts into `journal`, as if it had journaled from the start:
  // every segment, then every published CPU tensor. For a takeover (handover.h): call after
  // Shutdown, so nothing changes any more.
  void ExportState(TensorJournal* journal);

 private:
  struct TensorObject {
    uint64_t id = 0;
    TensorSpec spec;
    Block block;
    std::string owner_session;  // creator while pending ("" for a Put)
    bool pending = false;       // created, not sealed, not aborted
    bool published = false;     // a name points here
    bool sealed = false;
    bool expired = false;  // the pending timeout aborted it
    uint64_t version = 0;
    uint32_t leases = 0;
    int64_t created_unix_ms = 0;
    absl::Time pending_since;
    std::function<void()> on_expired;  // a Put's
    uint64_t last_granted = 0;         // a replica's: when it was last leased (grant_clock_)
    // What a lease table's slot names to hold this version (random, never 0): readable only in
    // the directories of those who may read it, so no process can pin a version it never saw.
    uint64_t pin_token = 0;
  };
  using Waiter = WaitList::Waiter;
  // Lease tables' slots per version (TableHoldingsLocked).
  using TableHoldings = absl::flat_hash_map<uint64_t, uint32_t>;
  // Holds mu_; on destruction releases it, then runs the callbacks queued meanwhile.
  class Locked;
  // Leases taken by the daemon itself (Read streams, Puts) belong to this pseudo-session.
  static constexpr const char* kInternalSession = "";

  absl::Status CheckServing() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Unpublishes the replica on `device` that no one leases and was leased longest ago (replicas
  // are a cache: they give way before a tensor of this broker's fails for capacity). False when
  // there is none.
  bool EvictReplicaLocked(const DLDevice& device) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a fetch of `spec` may reserve its memory now: fetches in flight, which no eviction
  // can give back, hold at most 1/kFetchShareDivisor of the pool together, so a slow origin
  // cannot crowd out this broker's own tensors. RESOURCE_EXHAUSTED naming the figures.
  absl::Status CheckFetchRoomLocked(const TensorSpec& spec) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Whether `nbytes` more could fit in `pool` once every replica EvictReplicaLocked may take
  // from it is gone (its free room plus their blocks): false means evicting cannot help.
  bool EvictionCouldMakeRoomLocked(const MemoryPool& pool, uint64_t nbytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether EvictReplicaLocked may take `object` for room on `device` (a replica no one leases,
  // directly or through a lease table: `held`).
  static bool EvictableFor(const TensorObject& object, const DLDevice& device,
                           const TableHoldings& held);
  // Each remote[] address's replicas held now and its counters (StoreStats::remotes).
  std::vector<StoreStats::Remote> RemotesLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  bool MayReadLocked(const Principal& caller, const TensorObject& object) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The published object `name` that `caller` may see; nullptr when none.
  TensorObject* VisibleLocked(const Principal& caller, const std::string& name)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Object `object_id` if `caller` may read it, else nullptr.
  TensorObject* ReadableLocked(const Principal& caller, uint64_t object_id) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The version of `name` that `wanted` picks (version, or after_version with oldest) and
  // `caller` may see: an object, nullptr to wait for (after_version), or NOT_FOUND.
  absl::StatusOr<TensorObject*> PickVersionLocked(const Principal& caller, const std::string& name,
                                                  const VersionWanted& wanted)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Unpublishes one version of `name` (its journal record goes; memory with its last lease).
  void UnpublishLocked(const std::string& name, uint64_t version)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Unpublishes every version of the published `name` (a kDeleted event), logging `why`.
  void DeleteNameLocked(const std::string& name, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells watchers of an event about `object` (the version concerned); `sequence` 0 takes the
  // next number of the version counter. Their wakes run once the lock drops.
  void EmitLocked(StoreEvent::Kind kind, const TensorObject& object, uint64_t sequence,
                  uint64_t previous_version = 0) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `caller` may publish `spec->name` now: CheckNameFreeLocked, and under a stream
  // ring's seat prefix (common/stream_seats.h) only a caller that may read the ring
  // (PERMISSION_DENIED, checked first) and only an ephemeral tensor (INVALID_ARGUMENT).
  absl::Status CheckNameLocked(const Principal& caller, TensorSpec* spec) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Not pending; replace allowed for the name's owner or an administrator; adds the name's
  // owner to the readers of an administrator's version.
  absl::Status CheckNameFreeLocked(const Principal& caller, TensorSpec* spec) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // A block for `spec` in `pool`, making room when short (ReclaimSlotPinnedLocked, then
  // replicas' eviction when it can help); segments the pool removed go to `removed`.
  absl::StatusOr<Block> AllocateLocked(MemoryPool& pool, const TensorSpec& spec,
                                       std::vector<std::string>* removed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<TensorObject*> ReserveLocked(const std::string& owner, const Principal& caller,
                                              const TensorSpec& spec)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<TensorObject*> FindPendingLocked(const std::string& session_id,
                                                  const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  TensorView PublishLocked(TensorObject* object, const Principal& by)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropPendingLocked(TensorObject* object) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells the journal (if any) that `object`'s version is published / no longer is (CPU only).
  // Tells `journal` (the store's own when null) of the published `object`.
  void JournalPublishedLocked(const TensorObject& object, TensorJournal* journal = nullptr)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void JournalUnpublishedLocked(const TensorObject& object) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  TensorGrant GrantLocked(const std::string& session_id, TensorObject* object, bool writable)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A Get's answer now: a grant, or nullopt when `name` is not published (for this session).
  std::optional<absl::StatusOr<TensorGrant>> TryGetLocked(const std::string& session_id,
                                                          const std::string& name,
                                                          const VersionWanted& wanted)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers every waiter for which `answer(waiter)` gives an answer (after the lock drops).
  void AnswerWaitersLocked(
      const std::function<std::optional<absl::StatusOr<TensorGrant>>(const Waiter&)>& answer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseLeaseOnLocked(uint64_t object_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<SegmentDescriptor> SegmentOfLocked(const std::string& session_id,
                                                    uint64_t lease_id)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Frees the object's memory if nothing refers to it any more: no name, no lease granted, and
  // no slot of a lease table that may name it (then it waits in slot_pinned_).
  void MaybeFreeLocked(TensorObject* object) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees `object`'s memory and forgets it (nothing refers to it any more).
  void FreeLocked(TensorObject* object) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // How many slots of lease tables name each version, counting a slot only when its table's
  // principal may read the version: one scan of every table (empty when there are none).
  TableHoldings TableHoldingsLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Slots of lease tables naming some versions: asked under the lock (AskAboutLocked), counted
  // once it is released (Count: one scan of each table), so that a user's tables hold up no
  // one else's calls. Counts by pin token.
  struct TableQuestion {
    std::optional<LeaseSlotTables::Snapshot> tables;
    absl::flat_hash_map<uint64_t, VersionReaders> wanted;  // by pin token
    TableHoldings Count() const {
      return tables.has_value() ? tables->Count(wanted) : TableHoldings{};
    }
  };
  void AskAboutLocked(const TensorObject& object, TableQuestion* question) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Stats' figures but the lease tables' leases.
  void StatsLocked(const Principal& caller, StoreStats* stats) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Frees what slot_pinned_ holds that its holders' tables name no more: one scan of each table
  // that pins something, however many versions wait; the other tables cost nothing.
  void ReclaimSlotPinnedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `session`'s table is gone: what only it pinned is freed (no scan).
  void ForgetTableLocked(const std::string& session) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes `ids` out of slot_pinned_ (no table pins them any more) and frees those nothing else
  // keeps.
  void FreeUnpinnedLocked(const std::vector<uint64_t>& ids) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A fresh pin token (pin_tokens_ has none like it), from getrandom(2); INTERNAL if it fails.
  absl::StatusOr<uint64_t> NewPinTokenLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells the directories of an event about `object` (EmitLocked's kinds).
  void UpdateDirectoriesLocked(StoreEvent::Kind kind, const TensorObject& object)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The record of `object` (a published version) in a directory.
  DirectoryEntry DirectoryEntryLocked(const TensorObject& object) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The pool serving `device`; nullptr when none does.
  MemoryPool* PoolForLocked(DLDevice device) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // What Get grants report about `object` (kept_versions empty).
  TensorView ViewLocked(const TensorObject& object) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // `info` (of a published name) with the versions its name keeps that `caller` may read: what
  // Stat, List, Seal and Put report.
  TensorView WithKeptVersionsLocked(const Principal& caller, TensorView info) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const StoreOptions options_;
  // Mutex rather than absl::Mutex: Debian's Abseil is not built for ThreadSanitizer, so
  // TSan could not see absl::Mutex's happens-before edges; pthread-based locks it does see.
  mutable Mutex mu_;
  std::vector<std::function<void()>> deferred_ ABSL_GUARDED_BY(mu_);     // run by Locked
  std::vector<std::unique_ptr<MemoryPool>> pools_ ABSL_GUARDED_BY(mu_);  // CPU first
  std::map<uint64_t, std::unique_ptr<TensorObject>> objects_ ABSL_GUARDED_BY(mu_);
  NameIndex names_ ABSL_GUARDED_BY(mu_);
  SessionTable sessions_ ABSL_GUARDED_BY(mu_);
  QuotaLedger ledger_ ABSL_GUARDED_BY(mu_);  // by owner uid (tensors), by caller's uid (streams)
  LeaseTable leases_ ABSL_GUARDED_BY(mu_);
  WaitList waiters_ ABSL_GUARDED_BY(mu_);  // GetOrWait's
  PrincipalDirectories directories_ ABSL_GUARDED_BY(mu_);
  LeaseSlotTables slot_tables_ ABSL_GUARDED_BY(mu_);
  // Objects nothing but lease tables' slots keep, each with the sessions whose tables named it
  // when it was let go of (the protocol: no other slot can come to hold it since): freed once
  // none of them does (checked at every session's end, the pending-expiry tick, Stats, and
  // before a shortage fails).
  std::map<uint64_t, std::vector<std::string>> slot_pinned_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, uint64_t> pin_tokens_ ABSL_GUARDED_BY(mu_);  // token -> object
  uint64_t next_object_id_ ABSL_GUARDED_BY(mu_) = 1;
  // Per remote[] address (a handful, from the config): fetches, fetched bytes, failures and
  // evictions since the start (StoreStats::Remote; replicas and their bytes are counted anew).
  std::map<std::string, StoreStats::Remote> remote_counts_ ABSL_GUARDED_BY(mu_);
  uint64_t grant_clock_ ABSL_GUARDED_BY(mu_) = 0;  // orders leases taken, for eviction
  uint64_t next_version_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  WatchHub watch_hub_;  // thread-safe itself; appended to under mu_ (lock order: mu_, then its)
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_TENSOR_STORE_H_
