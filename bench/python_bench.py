"""Python figures for tensorbroker_bench (run by it, against the same daemon, in the same run).

Prints one line per measurement: "row KEY MEDIAN_NS P10_NS P90_NS N LABEL...".
  py_raw_rtt        a raw Unix-socket round trip between two Python processes (the floor)
  py_shm_attach     multiprocessing.shared_memory: attach a segment by name and close it
  py_cycle          get, two DLPack views (np.from_dlpack), drop them, release()
  py_extra_view     one more DLPack view of a tensor already held, and dropping it
  py_release        Tensor.release()
Usage: python3 python_bench.py SOCKET ITERATIONS WARMUP
"""
import os
import socket
import sys
import time
from multiprocessing import shared_memory

import numpy as np


def summary(key, label, samples):
    samples = sorted(samples)
    n = len(samples)

    def pct(q):
        pos = q * (n - 1)
        lo = int(pos)
        hi = min(lo + 1, n - 1)
        return samples[lo] + (samples[hi] - samples[lo]) * (pos - lo)

    print(f"row {key} {pct(0.5):.0f} {pct(0.1):.0f} {pct(0.9):.0f} {n} {label}", flush=True)


def timed(fn, iterations, warmup):
    for _ in range(warmup):
        fn()
    out = []
    clock = time.perf_counter_ns
    for _ in range(iterations):
        start = clock()
        fn()
        out.append(clock() - start)
    return out


def raw_round_trip(iterations, warmup):
    # Forked before anything starts a thread: the child only echoes.
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:
        parent.close()
        while data := child.recv(16):
            child.send(data)
        os._exit(0)
    child.close()

    def once():
        parent.send(b"x")
        parent.recv(16)

    samples = timed(once, iterations, warmup)
    parent.close()
    os.waitpid(pid, 0)
    return samples


def shm_attach(iterations, warmup):
    owner = shared_memory.SharedMemory(create=True, size=4096)
    try:
        def once():
            shared_memory.SharedMemory(name=owner.name).close()
        return timed(once, iterations, warmup)
    finally:
        owner.close()
        owner.unlink()


def main():
    sock, iterations, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    summary("py_raw_rtt", "Python: raw Unix socket round trip, two processes",
            raw_round_trip(iterations, warmup))
    summary("py_shm_attach", "Python: shared_memory attach by name + close",
            shm_attach(iterations, warmup))

    import tensorbroker
    client = tensorbroker.connect(sock, fast_reads=False)  # the round-trip path
    name = "bench/py/small"
    client.put(name, np.arange(1024, dtype=np.float32), replace=True)

    def cycle():
        t = client.get(name, timeout=0)
        a = np.from_dlpack(t)
        b = np.from_dlpack(t)
        del a, b
        t.release()

    summary("py_cycle", "Python: get + 2 DLPack views + release (4 KiB)",
            timed(cycle, iterations, warmup))

    held = client.get(name, timeout=0)

    def extra_view():
        view = np.from_dlpack(held)
        del view

    summary("py_extra_view", "Python: one more DLPack view (make + drop)",
            timed(extra_view, iterations, warmup))
    held.release()

    samples = []
    for i in range(iterations + warmup):
        t = client.get(name, timeout=0)
        start = time.perf_counter_ns()
        t.release()
        if i >= warmup:
            samples.append(time.perf_counter_ns() - start)
    summary("py_release", "Python: Tensor.release()", samples)
    client.delete(name)
    client.close()


if __name__ == "__main__":
    main()
