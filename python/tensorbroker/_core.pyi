"""Type stubs for tensorbroker's native core (re-exported by the tensorbroker package)."""

from typing import Any, Iterable, Optional, Tuple, TypedDict, Union

DTypeLike = Union[str, Any]  # "float32", numpy dtypes and scalar types, torch dtypes

class TensorOrigin(TypedDict):
    peer: str  # the broker it was fetched from (remote[PREFIX] = ADDRESS), as configured
    version: int  # the origin's version
    fetched_unix_ms: int

class TensorStat(TypedDict):
    name: str
    dtype: str
    shape: list[int]
    strides: list[int]
    nbytes: int
    device: str
    sealed: bool
    mutable: bool
    version: int
    leases: int
    created_unix_ms: int
    owner_uid: int  # the uid that first published the name
    readers: list[str]  # ["*"] or "uid:N" / "gid:N" entries
    keep: int  # how many versions of the name stay readable by number
    kept_versions: list[int]  # stat() only: those readable now, ascending (the last is current)
    ephemeral: bool  # gone with the session that created it (a stream reader's seat, say)
    origin: Optional[TensorOrigin]  # a replica of another broker's tensor; None: published here

class PoolStats(TypedDict):
    device: str  # "cpu" or "cuda:N"
    handles: str  # "memfd" (CPU), "cuda-vmm" (VMM descriptors) or "cuda-ipc" (legacy CUDA IPC)
    capacity_bytes: int
    used_bytes: int
    reserved_bytes: int
    segments: int

class UserUsage(TypedDict):
    uid: int
    user: str  # the uid's name on the daemon's host; "" when unknown
    bytes: int
    tensors: int
    quota_bytes: int  # 0: unlimited
    quota_tensors: int  # 0: unlimited

class PeerUsage(TypedDict):
    peer: str  # another broker, by its certificate's first name
    calls: int  # calls it made on --peer-listen
    sent_bytes: int  # tensor bytes sent to it on Read streams

class RemoteUsage(TypedDict):
    peer: str  # a remote[PREFIX] address, as configured
    replicas: int  # replicas held now
    replica_bytes: int  # their bytes
    fetches: int  # fetched since the start (first fetches and new versions)
    fetched_bytes: int  # bytes they brought
    fetch_failures: int  # fetches that failed (nothing published)
    evictions: int  # replicas unpublished to make room

class ProcessMappings(TypedDict):
    cached_segments: int
    open_cuda_slabs: int  # legacy CUDA IPC handles open
    cached_cuda_slabs: int  # CUDA VMM slabs whose descriptor or mappings are kept
    pinned_segments: int

class BrokerStats(TypedDict):
    capacity_bytes: int
    used_bytes: int
    reserved_bytes: int
    tensors: int
    leases: int
    clients: int
    segments: int
    pending: int
    waiting_gets: int  # Gets waiting in the daemon for a name to be published
    watchers: int  # watch streams open
    pools: list[PoolStats]  # the CPU pool first, then one per GPU served
    users: list[UserUsage]  # every user for an administrator, else the caller
    peers: list[PeerUsage]  # every peer that called (administrators only)
    remotes: list[RemoteUsage]  # every remote[PREFIX] address fetched from (administrators only)

DeviceLike = Union[str, Any]  # "cpu", "cuda", "cuda:N", torch.device
StreamLike = Union[int, Any]  # a cudaStream_t value, torch.cuda.Stream, cupy.cuda.Stream

def process_mappings() -> ProcessMappings:
    """This process's mappings of broker memory: shared-memory segments cached for reuse, CUDA slabs open (closed with their last tensor) and segments page-locked."""

def default_socket() -> str:
    """The socket used when none is given: $TENSORBROKER_SOCKET, else /run/tensorbroker/broker.sock for root, else $XDG_RUNTIME_DIR/tensorbroker/broker.sock, else /tmp/tensorbroker-$UID/broker.sock."""

def connect(
    socket: Optional[str] = None,
    timeout: float = 5.0,
    reconnect_timeout: float = 30.0,
    fast_reads: bool = True,
) -> Client:
    """Connect to tensorbrokerd and open a session."""

class Cancellation:
    """Cancels waiting get() calls from any thread: get(name, cancel=c)."""

    def __init__(self) -> None: ...
    def cancel(self) -> None:
        """Cancel every get() given this token, now and later."""
    @property
    def cancelled(self) -> bool:
        """Whether cancel() was called."""

class Client:
    """A session with tensorbrokerd; made by connect()."""

    @property
    def socket(self) -> str:
        """The daemon's socket path."""
    @property
    def closed(self) -> bool: ...
    def put(
        self,
        name: str,
        obj: Any,
        replace: bool = False,
        *,
        mutable: bool = False,
        device: Optional[DeviceLike] = None,
        readers: Union[None, str, Iterable[str]] = None,
        keep: int = 1,
    ) -> TensorStat:
        """Publish a copy of `obj` under `name` and return its stat() dict."""
    def create(
        self,
        name: str,
        shape: Union[int, Iterable[int]],
        dtype: DTypeLike,
        mutable: bool = False,
        replace: bool = False,
        *,
        device: DeviceLike = "cpu",
        pinned: bool = False,
        readers: Union[None, str, Iterable[str]] = None,
        keep: int = 1,
    ) -> Tensor:
        """Reserve a writable tensor in broker memory to fill in place, then seal() it."""
    def get(
        self,
        name: str,
        timeout: Optional[float] = None,
        *,
        pinned: bool = False,
        device: Optional[DeviceLike] = None,
        cancel: Optional[Cancellation] = None,
        after_version: Optional[int] = None,
        version: Optional[int] = None,
        oldest: bool = False,
    ) -> Tensor:
        """The tensor published under `name`, without copying it."""
    async def get_async(
        self,
        name: str,
        timeout: Optional[float] = None,
        *,
        pinned: bool = False,
        device: Optional[DeviceLike] = None,
        after_version: Optional[int] = None,
        version: Optional[int] = None,
        oldest: bool = False,
    ) -> Tensor:
        """``get()`` for asyncio: awaits the tensor published under `name` without blocking the event loop."""
    async def put_async(
        self,
        name: str,
        obj: Any,
        replace: bool = False,
        *,
        mutable: bool = False,
        device: Optional[DeviceLike] = None,
        readers: Union[None, str, Iterable[str]] = None,
        keep: int = 1,
    ) -> TensorStat:
        """``put()`` for asyncio (the copy runs on the call pool)."""
    async def create_async(
        self,
        name: str,
        shape: Union[int, Iterable[int]],
        dtype: DTypeLike,
        mutable: bool = False,
        replace: bool = False,
        *,
        device: DeviceLike = "cpu",
        pinned: bool = False,
        readers: Union[None, str, Iterable[str]] = None,
        keep: int = 1,
    ) -> Tensor:
        """``create()`` for asyncio."""
    def delete(self, name: str) -> None:
        """Unpublish `name` at once; holders keep valid memory until they release it."""
    def list(self, prefix: str = "") -> list[TensorStat]:
        """stat() dicts of the published tensors whose names start with `prefix` that you may read, by name (every page the daemon answers with)."""
    def stat(self, name: str) -> TensorStat:
        """What the broker knows about `name`: the fields of `tensorbroker stat --json` (name, dtype, shape, strides, nbytes, device, sealed, mutable, version, leases, created_unix_ms, owner_uid, readers)."""
    def latest_version(self, name: str) -> int:
        """The current version of `name`, read from this uid's directory in shared memory (no call; a stat() when the directory cannot say). NotFound when it is not published or you may not read it."""
    def changed_since(self, name: str, version: int) -> bool:
        """Whether the current version of `name` is another than `version` (as latest_version(): no call)."""
    def stats(self) -> BrokerStats:
        """Daemon-wide counters and what each user holds (`users`: every user for an administrator, else you): the fields of `tensorbroker stats --json`."""
    def ping(self) -> None:
        """An empty round trip to the daemon."""
    def watch(self, prefix: str = "", *, after_version: Optional[int] = None) -> Watch:
        """Follow every publication, replacement, deletion and expiry under `prefix`."""
    def stream_writer(
        self,
        name: str,
        shape: Union[int, Iterable[int]],
        dtype: DTypeLike,
        *,
        slots: int = 8,
        max_readers: int = 4,
        frames_per_reader: int = 2,
        readers: Union[None, str, Iterable[str]] = None,
        replace: bool = False,
    ) -> StreamWriter:
        """Publish a stream ring under `name`: frames of one shape and dtype that readers"""
    def stream_reader(self, name: str, timeout: float = 5.0) -> StreamReader:
        """Follow the stream ring `name` (stream_writer). Waits up to `timeout` seconds for"""
    def close(self) -> None:
        """End the session. Tensors already returned stay valid."""
    def __enter__(self) -> Client: ...
    def __exit__(self, *args: object) -> None: ...  # close()

class Tensor:
    """A broker tensor this process holds a lease on."""

    @property
    def name(self) -> str: ...
    @property
    def shape(self) -> Tuple[int, ...]: ...
    @property
    def strides(self) -> Tuple[int, ...]:
        """In elements, as DLPack."""
    @property
    def ndim(self) -> int: ...
    @property
    def dtype(self) -> str:
        """NumPy spelling: "float32", "bool", "bfloat16", ..."""
    @property
    def nbytes(self) -> int: ...
    @property
    def version(self) -> int: ...
    @property
    def mutable(self) -> bool: ...
    @property
    def readonly(self) -> bool: ...
    @property
    def sealed(self) -> bool: ...
    @property
    def released(self) -> bool: ...
    @property
    def device(self) -> str:
        """"cpu", "cuda:N" (this process's ordinal) or "cuda_host" (pinned CPU memory)."""
    @property
    def pinned(self) -> bool:
        """CPU memory page-locked for CUDA (create/get with pinned=True)."""
    def __dlpack__(
        self,
        *,
        stream: Optional[int] = None,  # CUDA: 1, 2, -1 or a stream pointer; CPU: None
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> Any:
        """A DLPack capsule holding its own reference to the lease, released by its deleter.

        "dltensor_versioned" (DLPack 1.x, with the read-only flag) when max_version allows it, else the
        legacy "dltensor" that NumPy 1.24 and PyTorch 1.13 read.
        """
    def __dlpack_device__(self) -> Tuple[int, int]:
        """(device_type, device_id): (1, 0) = CPU (pinned tensors too), (2, N) = CUDA device N of this process."""
    def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> Any:
        """A NumPy view of the broker's pages (its own reference to the lease); read-only unless writable."""
    def numpy(self) -> Any:
        """np.asarray(t): a zero-copy NumPy view, bool included."""
    def torch(self) -> Any:
        """torch.from_dlpack(t); bool tensors come back as torch.bool (through a uint8 view where torch does not take DLPack's kDLBool, as 1.13)."""
    def view(self, dtype: DTypeLike) -> Tensor:
        """The same bytes as another dtype of the same item size (e.g. bool as uint8), with a reference of its own to the lease."""
    def seal(self, stream: Optional[StreamLike] = None) -> None:
        """Publish a tensor from create(). Unless it is mutable it is read-only from now on: do not write through views taken before."""
    async def seal_async(self, stream: Optional[StreamLike] = None) -> None:
        """``seal()`` for asyncio (a CUDA seal waits for the GPU on the call pool)."""
    def abort(self) -> None:
        """Drop a tensor from create() that was never sealed."""
    def release(self) -> None:
        """End this object's lease now (views made from it keep theirs). Idempotent."""
    def __enter__(self) -> Tensor: ...
    def __exit__(self, *args: object) -> None: ...  # release(); abort() first if never sealed

class WatchEvent:
    """One change under a watched prefix (Client.watch)."""

    @property
    def kind(self) -> str:
        """"published", "replaced", "deleted", "expired" (out of the name's kept history) or "lost" (events may have been missed)"""
    @property
    def sequence(self) -> int:
        """Increasing along the stream; resume with after_version=sequence"""
    @property
    def name(self) -> str:
        """The tensor's name ("" for lost)"""
    @property
    def version(self) -> int:
        """The version concerned"""
    @property
    def previous_version(self) -> int:
        """replaced: the version that was current"""
    @property
    def info(self) -> Optional[TensorStat]:
        """The version's stat() dict as at the event (leases 0); None for lost"""
    @property
    def lost_first(self) -> int:
        """lost: first sequence missed"""
    @property
    def lost_last(self) -> int:
        """lost: last sequence missed"""
    def get(self, timeout: Optional[float] = 0) -> Tensor:
        """client.get(name, timeout, version=version): the version this event names, while the name keeps it (NotFound after; FailedPrecondition for a lost event)."""

class Watch:
    """Events under a prefix (Client.watch): iterate it, or call next(). A context manager (close() on exit)."""

    def next(self, timeout: Optional[float] = None) -> Optional[WatchEvent]:
        """The next WatchEvent; None when `timeout` seconds passed first (None waits). Cancelled once closed."""
    def close(self) -> None:
        """End the watch, from any thread: an iteration waiting in another thread stops."""
    @property
    def closed(self) -> bool:
        """Whether close() was called."""
    @property
    def last_sequence(self) -> int:
        """The sequence of the last event returned (0: none yet)."""
    def __iter__(self) -> Watch: ...
    def __next__(self) -> WatchEvent: ...
    def __aiter__(self) -> Watch: ...
    async def __anext__(self) -> WatchEvent:
        """The next event for ``async for``; the wait runs on the wait pool. Cancelling the task closes the watch."""
    def __enter__(self) -> Watch: ...
    def __exit__(self, *args: object) -> None: ...  # close()

class StreamWriter:
    """The writer of a stream ring (Client.stream_writer). A context manager (close() on exit)."""

    def loan(self, timeout: float = 5.0) -> Tensor:
        """The frame to fill next: a writable Tensor, valid until publish(); the same one again until then. Waits up to `timeout` seconds while readers hold every other slot (DeadlineExceeded)."""
    def publish(self) -> int:
        """Make the loaned frame the newest and wake the readers; returns its sequence number (1, 2, ...)."""
    def close(self) -> None:
        """End the stream: readers get what was published, then the end. Deletes the name."""
    @property
    def readers(self) -> int:
        """Readers accepted now."""
    @property
    def name(self) -> str:
        """The stream's name."""
    def __enter__(self) -> StreamWriter: ...
    def __exit__(self, *args: object) -> None: ...  # close()

class StreamReader:
    """A reader of a stream ring (Client.stream_reader): iterate it, or call next(). A context manager (close() on exit)."""

    def next(self, timeout: Optional[float] = None) -> Optional[Tensor]:
        """The newest frame after the last one: a read-only Tensor (its version is the frame's sequence number); None when `timeout` seconds passed first (None waits). StreamEnded once the writer closed the stream and nothing newer remains; ResourceExhausted while this reader holds frames_per_reader frames."""
    def close(self) -> None:
        """Leave the stream (frames already returned stay valid). From any thread: a next() waiting in another thread raises Cancelled (an iteration stops)."""
    @property
    def last_sequence(self) -> int:
        """The sequence number of the last frame returned (0: none yet)."""
    @property
    def skipped(self) -> int:
        """Frames the last next() skipped over (published meanwhile)."""
    @property
    def name(self) -> str:
        """The stream's name."""
    def __iter__(self) -> StreamReader: ...
    def __next__(self) -> Tensor: ...
    def __enter__(self) -> StreamReader: ...
    def __exit__(self, *args: object) -> None: ...  # close()
