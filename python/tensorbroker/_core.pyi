"""Type stubs for tensorbroker's native core (re-exported by the tensorbroker package)."""

from types import TracebackType
from typing import Any, Iterable, Literal, Optional, Tuple, Type, TypedDict, Union

DTypeLike = Union[str, Any]  # "float32", numpy dtypes and scalar types, torch dtypes

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

class PoolStats(TypedDict):
    device: str  # "cpu" or "cuda:N"
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

class ProcessMappings(TypedDict):
    cached_segments: int
    open_cuda_slabs: int
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
    pools: list[PoolStats]  # the CPU pool first, then one per GPU served
    users: list[UserUsage]  # every user for an administrator, else the caller

DeviceLike = Union[str, Any]  # "cpu", "cuda", "cuda:N", torch.device
StreamLike = Union[int, Any]  # a cudaStream_t value, torch.cuda.Stream, cupy.cuda.Stream

def process_mappings() -> ProcessMappings:
    """This process's mappings of broker memory (segments cached, CUDA slabs open, pinned)."""

def default_socket() -> str:
    """The socket used when none is given ($TENSORBROKER_SOCKET, else the per-user default)."""

def connect(
    socket: Optional[str] = None, timeout: float = 5.0, reconnect_timeout: float = 30.0
) -> Client:
    """Connect to tensorbrokerd and open a session (Unavailable / PermissionDenied on failure)."""

class Client:
    """A session with tensorbrokerd. Thread-safe; the GIL is released during every call."""

    @property
    def socket(self) -> str: ...
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
    ) -> TensorStat:
        """Publish one copy of `obj` (__dlpack__ or buffer protocol, CPU or CUDA, any strides)."""
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
    ) -> Tensor:
        """Reserve a writable broker tensor; fill it through np.asarray / torch.from_dlpack, then seal()."""
    def get(
        self,
        name: str,
        timeout: Optional[float] = None,
        *,
        pinned: bool = False,
        device: Optional[DeviceLike] = None,
    ) -> Tensor:
        """The tensor published under `name`; waits up to `timeout` s (None: until published)."""
    def delete(self, name: str) -> None: ...
    def list(self, prefix: str = "") -> list[TensorStat]: ...
    def stat(self, name: str) -> TensorStat: ...
    def stats(self) -> BrokerStats: ...
    def ping(self) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> Client: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None: ...

class Tensor:
    """A lease on a broker tensor; zero-copy views through __dlpack__ and __array__."""

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
    def pinned(self) -> bool: ...
    def __dlpack__(
        self,
        *,
        stream: Optional[int] = None,  # CUDA: 1, 2, -1 or a stream pointer; CPU: None
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> Any:
        """A capsule with its own reference to the lease: "dltensor_versioned" if max_version >= (1, 0), else "dltensor".

        copy=True: a private writable copy instead (CPU tensors only; BufferError otherwise).
        """
    def __dlpack_device__(self) -> Tuple[int, int]: ...
    def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> Any: ...
    def numpy(self) -> Any:
        """A zero-copy numpy.ndarray (bool included); read-only unless the tensor is writable."""
    def torch(self) -> Any:
        """A zero-copy torch.Tensor; bool tensors come back as torch.bool."""
    def view(self, dtype: DTypeLike) -> Tensor:
        """The same bytes as another dtype of the same item size, with its own reference to the lease."""
    def seal(self, stream: Optional[StreamLike] = None) -> None:
        """Publish; for CUDA, first wait for `stream` (None: all work on the GPU)."""
    def abort(self) -> None: ...
    def release(self) -> None: ...
    def __enter__(self) -> Tensor: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None: ...
