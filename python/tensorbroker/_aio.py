"""asyncio for tensorbroker: the calls that may block run on thread pools of their own.

``await client.get_async(name, timeout)`` never blocks the event loop: the wait runs on a thread
of the wait pool (threads ``tensorbroker-wait_N``, at most ``$TENSORBROKER_ASYNC_THREADS``,
default 64, at once; further waits queue for a thread) with the GIL released. Cancelling the
awaiting task cancels the wait through a :class:`tensorbroker.Cancellation`: by the time the
``CancelledError`` reaches the caller, the daemon has dropped the waiter and a tensor that was
granted meanwhile has been released.

``put_async``, ``create_async`` and ``Tensor.seal_async`` run on a pool of their own
(``tensorbroker-call_N``, 8 threads), so waits never hold them up. They cannot stop half-way:
cancelled, they finish first (a put or seal publishes), then raise ``CancelledError``; a
cancelled ``create_async`` aborts the tensor it created.

At interpreter exit, waits still running are cancelled, so they do not hold the exit up.
"""

import asyncio
import concurrent.futures.thread  # registers its exit hook now, before ours (see below)
import functools
import os
import threading

from ._core import Cancellation, Client, Tensor, Watch
from .errors import Cancelled

_DEFAULT_WAIT_THREADS = 64
_CALL_THREADS = 8

_pools = {}  # "wait" / "call" -> ThreadPoolExecutor, made at first use
_pools_lock = threading.Lock()
_waits = set()  # Cancellations of the get_async calls in flight (guarded by _pools_lock)


def _wait_threads():
    text = os.environ.get("TENSORBROKER_ASYNC_THREADS", "")
    if not text:
        return _DEFAULT_WAIT_THREADS
    try:
        threads = int(text)
    except ValueError:
        threads = 0
    if threads < 1:
        raise ValueError(f"TENSORBROKER_ASYNC_THREADS: {text!r} is not a positive integer")
    return threads


def _executor(kind):
    with _pools_lock:
        if kind not in _pools:
            threads = _wait_threads() if kind == "wait" else _CALL_THREADS
            _pools[kind] = concurrent.futures.ThreadPoolExecutor(
                max_workers=threads, thread_name_prefix=f"tensorbroker-{kind}")
        return _pools[kind]


def _cancel_waits():
    with _pools_lock:
        waits = list(_waits)
    for cancel in waits:
        cancel.cancel()


# Before concurrent.futures joins the pool's threads at exit (its hook was registered first,
# and these run last-registered first), end the waits that would keep them busy.
if hasattr(threading, "_register_atexit"):
    threading._register_atexit(_cancel_waits)


async def _run(pool, call, *, on_cancel=None, undo=None):
    """Runs `call()` on the pool `pool` ("wait" or "call"). If the awaiting task is cancelled: `on_cancel()`, then wait
    for `call` to end (its thread cannot be stopped), `undo(result)` if it succeeded, and
    re-raise the cancellation."""
    loop = asyncio.get_running_loop()
    future = loop.run_in_executor(_executor(pool), call)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        if on_cancel is not None:
            on_cancel()
        while not future.done():
            try:
                await asyncio.wait({future})
            except asyncio.CancelledError:
                pass  # cancelled again: the call still has to end first
        if undo is not None and not future.cancelled() and future.exception() is None:
            undo(future.result())
        raise


async def get_async(self, name, timeout=None, *, pinned=False, device=None, after_version=None,
                    version=None, oldest=False):
    """``get()`` for asyncio: awaits the tensor published under `name` without blocking the
    event loop. Cancelling the task cancels the wait and leaves no waiter and no lease."""
    cancel = Cancellation()
    with _pools_lock:
        _waits.add(cancel)
    try:
        return await _run(
            "wait", functools.partial(self.get, name, timeout, pinned=pinned, device=device,
                                      cancel=cancel, after_version=after_version,
                                      version=version, oldest=oldest),
            on_cancel=cancel.cancel, undo=Tensor.release)
    finally:
        with _pools_lock:
            _waits.discard(cancel)


async def put_async(self, name, obj, replace=False, *, mutable=False, device=None, readers=None,
                    keep=1):
    """``put()`` for asyncio (the copy runs on the call pool). Cancelled, it finishes first."""
    put = functools.partial(self.put, name, obj, replace, mutable=mutable, device=device,
                            readers=readers, keep=keep)
    return await _run("call", put)


def _abort_created(tensor):
    if not tensor.released:
        tensor.abort()


async def create_async(self, name, shape, dtype, mutable=False, replace=False, *, device="cpu",
                       pinned=False, readers=None, keep=1):
    """``create()`` for asyncio. Cancelled, the tensor it created is aborted."""
    create = functools.partial(self.create, name, shape, dtype, mutable, replace, device=device,
                               pinned=pinned, readers=readers, keep=keep)
    return await _run("call", create, undo=_abort_created)


async def seal_async(self, stream=None):
    """``seal()`` for asyncio (a CUDA seal waits for the GPU on the call pool). Cancelled, it
    finishes first: the tensor is published."""
    return await _run("call", functools.partial(self.seal, stream))


def _watch_aiter(self):
    return self


async def _watch_anext(self):
    """The next event for ``async for``; the wait runs on the wait pool. Cancelling the task
    closes the watch."""
    try:
        return await _run("wait", functools.partial(self.next, None), on_cancel=self.close)
    except Cancelled:
        if self.closed:
            raise StopAsyncIteration from None
        raise


Watch.__aiter__ = _watch_aiter
Watch.__anext__ = _watch_anext
Client.get_async = get_async
Client.put_async = put_async
Client.create_async = create_async
Tensor.seal_async = seal_async
