#!/usr/bin/python3
"""What asyncio costs on top of the blocking calls (tensorbroker/_aio.py): figures only.

Against a daemon of its own, side by side in one run, median / p10 / p90 of N samples:
  get + release of a published 4 KiB tensor:  client.get()  vs  await client.get_async()
  put to consumer: a consumer waiting in this process (a thread in get(), or a task in
    get_async()) gets the tensor a put publishes: from the put's start to the consumer
    holding it (one clock read by both)
  cancel: task.cancel() of a waiting get_async until CancelledError reaches the caller

  PYTHONPATH=build/python bench/asyncio_bench.py [--daemon build/daemon/tensorbrokerd] [-n 2000]
"""

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

import tensorbroker

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "python"))
from daemon_wait import wait_until_serving  # noqa: E402  (tests/python/daemon_wait.py)

clock = time.perf_counter_ns


def row(label, samples):
    samples = sorted(samples)

    def pct(q):
        return samples[min(len(samples) - 1, int(q * len(samples)))] / 1000

    print(f"{label:<58} {pct(0.5):9.1f} us {pct(0.1):9.1f} us {pct(0.9):9.1f} us  "
          f"(n={len(samples)})", flush=True)


def get_release_sync(client, n):
    out = []
    for _ in range(n):
        start = clock()
        client.get("bench/x").release()
        out.append(clock() - start)
    return out


async def get_release_async(client, n):
    out = []
    for _ in range(n):
        start = clock()
        (await client.get_async("bench/x")).release()
        out.append(clock() - start)
    return out


def wake_sync(client, n):
    out = []
    frame = np.zeros(4096, np.uint8)
    for i in range(n):
        got = {}

        def consume(name=f"bench/wake/sync/{i}"):
            t = client.get(name, timeout=60)
            got["at"] = clock()
            t.release()

        consumer = threading.Thread(target=consume)
        consumer.start()
        while client.stats()["waiting_gets"] == 0:
            time.sleep(0.0002)
        put_start = clock()
        client.put(f"bench/wake/sync/{i}", frame)
        consumer.join()
        out.append(got["at"] - put_start)
        client.delete(f"bench/wake/sync/{i}")
    return out


async def wake_async(client, n):
    out = []
    frame = np.zeros(4096, np.uint8)
    for i in range(n):
        name = f"bench/wake/async/{i}"

        async def consume():
            t = await client.get_async(name, timeout=60)
            at = clock()
            t.release()
            return at

        consumer = asyncio.create_task(consume())
        while client.stats()["waiting_gets"] == 0:
            await asyncio.sleep(0.0002)
        put_start = clock()
        client.put(name, frame)
        out.append(await consumer - put_start)
        client.delete(name)
    return out


async def cancel_async(client, n):
    out = []
    for _ in range(n):
        task = asyncio.create_task(client.get_async("bench/never"))
        while client.stats()["waiting_gets"] == 0:
            await asyncio.sleep(0.0002)
        start = clock()
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        out.append(clock() - start)
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--daemon", default="build/daemon/tensorbrokerd")
    parser.add_argument("-n", type=int, default=2000)
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="tb-asyncio-bench.")
    sock = os.path.join(workdir, "broker.sock")
    log = open(os.path.join(workdir, "daemon.log"), "wb")
    daemon = subprocess.Popen([args.daemon, "--socket", sock, "--log-level", "warning"],
                              stderr=log)
    try:
        wait_until_serving(sock, daemon, log.name)
        client = tensorbroker.connect(sock)
        client.put("bench/x", np.zeros(4096, np.uint8))
        n, wakes = args.n, max(50, args.n // 10)
        print(f"tensorbroker {tensorbroker.__version__}, Python {sys.version.split()[0]}, "
              f"{os.cpu_count()} CPUs; median / p10 / p90")
        get_release_sync(client, 200)  # warm-up: mappings, pool threads
        asyncio.run(get_release_async(client, 200))
        row("get + release, 4 KiB, published: get()", get_release_sync(client, n))
        row("get + release, 4 KiB, published: await get_async()",
            asyncio.run(get_release_async(client, n)))
        row("put 4 KiB until a waiting get() in a thread holds it", wake_sync(client, wakes))
        row("put 4 KiB until a waiting get_async() in a task holds it",
            asyncio.run(wake_async(client, wakes)))
        row("cancel a waiting get_async (task.cancel() to CancelledError)",
            asyncio.run(cancel_async(client, wakes)))
        client.close()
    finally:
        daemon.terminate()
        daemon.wait(60)
        log.close()


if __name__ == "__main__":
    main()
