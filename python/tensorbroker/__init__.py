"""tensorbroker: share tensors between processes by name, without copying them.

A daemon (tensorbrokerd) keeps tensors in shared memory; this package publishes NumPy arrays and
PyTorch tensors there and hands them back to any process as zero-copy views through DLPack::

    import numpy as np, tensorbroker
    client = tensorbroker.connect()                 # $TENSORBROKER_SOCKET or the default socket
    client.put("frames/0", np.ones((100, 10000), np.float32))

    # in another process
    t = tensorbroker.connect().get("frames/0", timeout=10)
    x = np.asarray(t)                               # or torch.from_dlpack(t): same pages

Each view holds a lease on the broker's memory, ended when the view is garbage-collected.

CUDA: ``client.create(name, shape, dtype, device="cuda:0")`` or ``client.put(name, cuda_tensor)``
keep the tensor in device memory the daemon owns; ``get`` returns it on this process's ordinal of
that GPU through CUDA IPC (torch.from_dlpack / cupy.from_dlpack, no copy). ``get(name,
pinned=True)`` maps a CPU tensor page-locked for asynchronous host-to-device copies.

Streams: ``client.get(name, after_version=v)`` waits for a version newer than ``v``;
``put``/``create`` take ``keep=N`` to keep the last N versions readable as ``get(name,
version=v)``; ``for ev in client.watch("camera/")`` follows every publication under a prefix.
``client.stream_writer(name, shape, dtype)`` and ``client.stream_reader(name)`` stream frames of
one shape through a ring, with no daemon round trip per frame.

asyncio: ``await client.get_async(name, timeout)`` (and ``put_async``, ``create_async``,
``Tensor.seal_async``) never block the event loop; cancelling the task cancels the wait.
"""

from . import _aio, errors
from ._core import (Cancellation, Client, StreamReader, StreamWriter, Tensor, Watch, WatchEvent,
                    connect, default_socket, process_mappings)
from ._version import __version__
from .errors import *  # noqa: F401,F403  (Error, NotFound, ... : see tensorbroker.errors)

__all__ = ["connect", "default_socket", "process_mappings", "Client", "Tensor", "Cancellation",
           "Watch", "WatchEvent", "StreamWriter", "StreamReader", "errors"] + [
    name for name in errors.__all__ if name != "error_class_for_code"]
