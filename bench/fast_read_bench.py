"""Reads without a round trip (issue 34) from Python, as figures (no pass/fail), side by side in
one run against a tensorbrokerd it starts (the build tree's, or $TENSORBROKERD):

  floor            a Python read of a seqlocked record in a shared mapping (sequence, 8 words,
                   sequence: struct.unpack_from on an mmap)
  latest_version   from the directory, and asked of the daemon (connect(fast_reads=False))
  get              get + a DLPack view (np.from_dlpack) + release(), from the directory and with
                   a round trip; and with np.asarray as the view
  shared_memory    multiprocessing.shared_memory: attach a block by name, view it (np.ndarray),
                   close: what users write by hand

Each figure is the median of 5 rounds (ns or us per operation).
Usage: PYTHONPATH=build/python /usr/bin/python3 bench/fast_read_bench.py [ITERATIONS]
"""
import mmap
import os
import struct
import subprocess
import sys
import tempfile
import time
from multiprocessing import shared_memory

import numpy as np

import tensorbroker as tb


def per_op_ns(fn, iterations, rounds=5):
    """Median over `rounds` of the mean nanoseconds per call of `fn`."""
    results = []
    for _ in range(rounds):
        start = time.perf_counter_ns()
        for _ in range(iterations):
            fn()
        results.append((time.perf_counter_ns() - start) / iterations)
    return sorted(results)[rounds // 2]


def seqlock_floor(iterations):
    page = mmap.mmap(-1, 4096)
    struct.pack_into("<9Q", page, 0, 2, 1, 2, 3, 4, 5, 6, 7, 8)
    unpack = struct.Struct("<Q").unpack_from
    words = struct.Struct("<8Q").unpack_from

    def read():
        while True:
            seq = unpack(page, 0)[0]
            values = words(page, 8)
            if seq % 2 == 0 and unpack(page, 0)[0] == seq:
                return values
    return per_op_ns(read, iterations)


def start_daemon(directory):
    binary = os.environ.get("TENSORBROKERD", os.path.join(
        os.path.dirname(__file__), "..", "build", "daemon", "tensorbrokerd"))
    sock = os.path.join(directory, "broker.sock")
    daemon = subprocess.Popen([binary, "--socket", sock, "--log-level", "warning"])
    client = tb.connect(sock, timeout=30)
    return daemon, sock, client


def main():
    iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 100000
    slow = max(1, iterations // 50)
    with tempfile.TemporaryDirectory() as directory:
        daemon, sock, fast = start_daemon(directory)
        try:
            asking = tb.connect(sock, fast_reads=False)
            fast.put("bench/x", np.ones(1024, dtype=np.float32))
            for client in (fast, asking):
                client.get("bench/x").release()  # maps the segment

            def get_view(client, view):
                def op():
                    t = client.get("bench/x")
                    v = view(t)
                    del v
                    t.release()
                return op

            rows = [
                ("Python seqlock read of a shared record (the floor)", seqlock_floor(iterations)),
                ("latest_version, from the directory",
                 per_op_ns(lambda: fast.latest_version("bench/x"), iterations)),
                ("latest_version, asked of the daemon (stat)",
                 per_op_ns(lambda: asking.latest_version("bench/x"), slow)),
                ("get + np.from_dlpack + release, from the directory",
                 per_op_ns(get_view(fast, np.from_dlpack), iterations)),
                ("get + np.from_dlpack + release, with a round trip",
                 per_op_ns(get_view(asking, np.from_dlpack), slow)),
                ("get + np.asarray + release, from the directory",
                 per_op_ns(get_view(fast, np.asarray), iterations)),
            ]
            block = shared_memory.SharedMemory(create=True, size=4096)
            try:
                def attach():
                    m = shared_memory.SharedMemory(name=block.name)
                    a = np.ndarray((1024,), dtype=np.float32, buffer=m.buf)
                    del a
                    m.close()
                rows.append(("shared_memory attach by name + np.ndarray + close",
                             per_op_ns(attach, slow * 10)))
            finally:
                block.close()
                block.unlink()
            print(f"fast_read_bench.py: {os.cpu_count()} CPUs; median of 5 rounds\n")
            for label, ns in rows:
                shown = f"{ns:.0f} ns" if ns < 1000 else f"{ns / 1000:.2f} us"
                print(f"{label:<56} {shown:>10}")
        finally:
            daemon.terminate()
            daemon.wait()


if __name__ == "__main__":
    main()
