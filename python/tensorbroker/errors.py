"""Exceptions raised by tensorbroker.

Every broker error is a :class:`Error`, and also the builtin exception a Python programmer
would reach for first, so ``except KeyError`` or ``except TimeoutError`` work too::

    Error                               base of everything below; .code is the gRPC code name
    ├── NotFound(KeyError)              no tensor published under that name
    ├── AlreadyExists                   name taken (pass replace=True to publish a new version)
    ├── InvalidArgument(ValueError)     malformed name, dtype, shape, strides or object
    ├── ResourceExhausted(MemoryError)  a limit ran out: the broker's --capacity, /dev/shm, or
    │                                   the caller's --quota-bytes / --quota-tensors
    │                                   (CapacityError is its earlier name)
    ├── Timeout(TimeoutError)           get() waited `timeout` seconds and nothing was published
    ├── Cancelled                       get()'s Cancellation was cancelled (get_async() turns
    │                                   it into asyncio.CancelledError)
    ├── PermissionDenied(PermissionError) the socket or object belongs to someone else
    ├── Unavailable(ConnectionError)    no daemon answers (not running, or shutting down)
    └── FailedPrecondition(RuntimeError) the tensor is in the wrong state (e.g. sealed twice),
                                        or the socket is not to be trusted (served by another
                                        user, or in someone else's /tmp/tensorbroker-$UID)

The message always says what was wrong: the field, the value and the rule it broke.
"""

__all__ = [
    "Error",
    "NotFound",
    "AlreadyExists",
    "InvalidArgument",
    "ResourceExhausted",
    "CapacityError",
    "Timeout",
    "Cancelled",
    "PermissionDenied",
    "Unavailable",
    "FailedPrecondition",
    "StreamEnded",
    "error_class_for_code",
]


class Error(Exception):
    """Base class of every error the broker reports."""

    #: The gRPC status code name the daemon (or client library) answered with.
    code = "UNKNOWN"


class NotFound(Error, KeyError):
    """No tensor is published under that name (or the lease is gone)."""

    code = "NOT_FOUND"

    def __str__(self):
        # KeyError would show the message in quotes; a sentence reads better.
        return Exception.__str__(self)


class AlreadyExists(Error):
    """The name is taken; pass ``replace=True`` to publish a new version."""

    code = "ALREADY_EXISTS"


class InvalidArgument(Error, ValueError):
    """A malformed name, dtype, shape, strides or object."""

    code = "INVALID_ARGUMENT"


class ResourceExhausted(Error, MemoryError):
    """A limit ran out: the broker's capacity (--capacity, --cuda-capacity) or /dev/shm has no
    room for the tensor, or the caller's quota (--quota-bytes, --quota-tensors) would be
    exceeded. The message names the limit ("capacity", "quota-bytes", ...) and the usage."""

    code = "RESOURCE_EXHAUSTED"


#: The earlier name of :class:`ResourceExhausted` (from before quotas), the same class.
CapacityError = ResourceExhausted


class Timeout(Error, TimeoutError):
    """The wait ran out before the name was published."""

    code = "DEADLINE_EXCEEDED"


class Cancelled(Error):
    """The wait was cancelled through its :class:`tensorbroker.Cancellation`; no lease and no
    waiter is left behind."""

    code = "CANCELLED"


class PermissionDenied(Error, PermissionError):
    """The caller may not use that socket or object."""

    code = "PERMISSION_DENIED"


class Unavailable(Error, ConnectionError):
    """No daemon answers on the socket, or it is shutting down."""

    code = "UNAVAILABLE"


class FailedPrecondition(Error, RuntimeError):
    """The tensor is in the wrong state for the call (e.g. sealed twice, deleted while pending),
    or connect() refused to trust the socket: it is served by a user other than root, the
    daemon's user ($TENSORBROKER_DAEMON_USER, else ``tensorbroker``) or this process's own, or
    it lies in a per-user /tmp/tensorbroker-$UID that is not that user's own, mode 0700."""

    code = "FAILED_PRECONDITION"


class StreamEnded(Error, EOFError):
    """The stream's writer closed it and every frame it published has been read
    (StreamReader.next; iterating a StreamReader just stops)."""

    code = "OUT_OF_RANGE"


_BY_CODE = {
    "NOT_FOUND": NotFound,
    "ALREADY_EXISTS": AlreadyExists,
    "INVALID_ARGUMENT": InvalidArgument,
    "OUT_OF_RANGE": StreamEnded,
    "RESOURCE_EXHAUSTED": ResourceExhausted,
    "DEADLINE_EXCEEDED": Timeout,
    "CANCELLED": Cancelled,
    "PERMISSION_DENIED": PermissionDenied,
    "UNAVAILABLE": Unavailable,
    "FAILED_PRECONDITION": FailedPrecondition,
}


def error_class_for_code(code):
    """The exception class for a gRPC status code name such as ``"NOT_FOUND"``."""
    return _BY_CODE.get(code, Error)
