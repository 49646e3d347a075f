"""asyncio for tensorbroker: the calls that may block run on a thread pool of their own.

``await client.get_async(name, timeout)`` never blocks the event loop: the wait runs on one of
the pool's threads (``tensorbroker-async-N``, at most ``$TENSORBROKER_ASYNC_THREADS``, default
64, at once; further calls queue for a thread) with the GIL released. Cancelling the awaiting
task cancels the wait through a :class:`tensorbroker.Cancellation`: by the time the
``CancelledError`` reaches the caller, the daemon has dropped the waiter and a tensor that was
granted meanwhile has been released.

``put_async``, ``create_async`` and ``Tensor.seal_async`` cannot stop half-way: cancelled, they
finish first (a put or seal publishes), then raise ``CancelledError``; a cancelled
``create_async`` aborts the tensor it created.

At interpreter exit, waits still running are cancelled, so they do not hold the exit up.
"""

import asyncio
import concurrent.futures
import functools
import os
import threading

from ._core import Cancellation, Client, Tensor

_DEFAULT_THREADS = 64

_pool = None
_pool_lock = threading.Lock()
_waits = set()  # Cancellations of the get_async calls in flight (guarded by _pool_lock)


def _threads():
    text = os.environ.get("TENSORBROKER_ASYNC_THREADS", "")
    if not text:
        return _DEFAULT_THREADS
    try:
        threads = int(text)
    except ValueError:
        threads = 0
    if threads < 1:
        raise ValueError(f"TENSORBROKER_ASYNC_THREADS: {text!r} is not a positive integer")
    return threads


def _executor():
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=_threads(), thread_name_prefix="tensorbroker-async")
        return _pool


def _cancel_waits():
    with _pool_lock:
        waits = list(_waits)
    for cancel in waits:
        cancel.cancel()


# Before concurrent.futures joins the pool's threads at exit (its hook was registered first,
# and these run last-registered first), end the waits that would keep them busy.
if hasattr(threading, "_register_atexit"):
    threading._register_atexit(_cancel_waits)


async def _run(call, *, on_cancel=None, undo=None):
    """Runs `call()` on the pool. If the awaiting task is cancelled: `on_cancel()`, then wait
    for `call` to end (its thread cannot be stopped), `undo(result)` if it succeeded, and
    re-raise the cancellation."""
    loop = asyncio.get_running_loop()
    future = loop.run_in_executor(_executor(), call)
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


async def get_async(self, name, timeout=None, *, pinned=False, device=None):
    """``get()`` for asyncio: awaits the tensor published under `name` without blocking the
    event loop. Cancelling the task cancels the wait and leaves no waiter and no lease."""
    cancel = Cancellation()
    with _pool_lock:
        _waits.add(cancel)
    try:
        return await _run(
            functools.partial(self.get, name, timeout, pinned=pinned, device=device,
                              cancel=cancel),
            on_cancel=cancel.cancel, undo=Tensor.release)
    finally:
        with _pool_lock:
            _waits.discard(cancel)


async def put_async(self, name, obj, replace=False, *, mutable=False, device=None, readers=None):
    """``put()`` for asyncio (the copy runs on the pool). Cancelled, it finishes first."""
    return await _run(functools.partial(self.put, name, obj, replace, mutable=mutable,
                                        device=device, readers=readers))


def _abort_created(tensor):
    if not tensor.released:
        tensor.abort()


async def create_async(self, name, shape, dtype, mutable=False, replace=False, *, device="cpu",
                       pinned=False, readers=None):
    """``create()`` for asyncio. Cancelled, the tensor it created is aborted."""
    return await _run(functools.partial(self.create, name, shape, dtype, mutable, replace,
                                        device=device, pinned=pinned, readers=readers),
                      undo=_abort_created)


async def seal_async(self, stream=None):
    """``seal()`` for asyncio (a CUDA seal waits for the GPU on the pool). Cancelled, it
    finishes first: the tensor is published."""
    return await _run(functools.partial(self.seal, stream))


Client.get_async = get_async
Client.put_async = put_async
Client.create_async = create_async
Tensor.seal_async = seal_async
