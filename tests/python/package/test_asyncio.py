"""asyncio (tensorbroker/_aio.py) and Cancellation: waits that never block the event loop and
that, when cancelled, leave no waiter in the daemon (stats()["waiting_gets"]) and no lease."""

import asyncio
import http.client
import io
import os
import random
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import tensorbroker
from conftest import HANG_GUARD, wait_for

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "python",
                        "examples")


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, HANG_GUARD))


async def until(predicate, what):
    """Polls `predicate` from the event loop (yielding between tries) until it holds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + HANG_GUARD
    while not predicate():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def waiting(client):
    return client.stats()["waiting_gets"]


def test_cancellation_is_a_thread_safe_token(client):
    cancel = tensorbroker.Cancellation()
    assert not cancel.cancelled and repr(cancel) == "<tensorbroker.Cancellation>"
    cancel.cancel()
    cancel.cancel()  # idempotent
    assert cancel.cancelled and repr(cancel) == "<tensorbroker.Cancellation cancelled>"
    client.put("aio/present", np.arange(3))
    with pytest.raises(tensorbroker.Cancelled) as e:
        client.get("aio/present", cancel=cancel)  # cancelled before it starts: nothing asked
    assert e.value.code == "CANCELLED" and "get 'aio/present': cancelled" in str(e.value)
    assert isinstance(e.value, tensorbroker.Error)
    with pytest.raises(TypeError, match="cancel: expected a tensorbroker.Cancellation or None, "
                                        "got str"):
        client.get("aio/present", cancel="now")
    assert client.stat("aio/present")["leases"] == 0


def test_cancel_from_another_thread_ends_a_blocking_get(client):
    cancel = tensorbroker.Cancellation()
    result = {}

    def wait():
        try:
            client.get("aio/thread/absent", cancel=cancel)  # no timeout: until published
        except tensorbroker.Cancelled as e:
            result["error"] = e

    waiter = threading.Thread(target=wait)
    waiter.start()
    wait_for(lambda: waiting(client) == 1, "the get to wait in the daemon")
    cancel.cancel()
    waiter.join(HANG_GUARD)
    assert not waiter.is_alive()
    assert 'cancelled its wait for name="aio/thread/absent"' in str(result["error"])
    assert waiting(client) == 0
    client.put("aio/thread/absent", np.zeros(2))
    assert client.stat("aio/thread/absent")["leases"] == 0 and client.stats()["leases"] == 0


def test_get_async_waits_without_blocking_the_event_loop(client):
    async def main():
        ticks = 0
        got = asyncio.create_task(client.get_async("aio/later", timeout=HANG_GUARD))
        await until(lambda: waiting(client) == 1, "get_async to wait in the daemon")
        # The loop keeps running while the wait goes on: these steps happen during it.
        for _ in range(5):
            await asyncio.sleep(0)
            ticks += 1
        assert not got.done()
        info = await client.put_async("aio/later", np.arange(6, dtype=np.int32).reshape(2, 3))
        tensor = await got
        return ticks, info, tensor

    ticks, info, tensor = run(main())
    assert ticks == 5 and info["version"] == tensor.version
    assert tensor.name == "aio/later" and tensor.shape == (2, 3) and tensor.dtype == "int32"
    np.testing.assert_array_equal(np.asarray(tensor), np.arange(6).reshape(2, 3))
    assert client.stat("aio/later")["leases"] == 1
    tensor.release()
    assert client.stat("aio/later")["leases"] == 0 and waiting(client) == 0


def test_cancelling_get_async_leaves_no_waiter_and_no_lease(client):
    leases_before = client.stats()["leases"]

    async def main():
        task = asyncio.create_task(client.get_async("aio/never"))  # timeout None: forever
        await until(lambda: waiting(client) == 1, "get_async to wait in the daemon")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Nothing to poll for: by the time CancelledError arrives, the daemon dropped it.
        assert waiting(client) == 0
        assert client.stats()["leases"] == leases_before

    run(main())
    client.put("aio/never", np.ones(4))  # published after the cancellation: nobody takes it
    assert client.stat("aio/never")["leases"] == 0
    assert client.stats()["leases"] == leases_before and waiting(client) == 0


def test_wait_for_timeout_around_get_async_cancels_the_wait(client):
    async def main():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(client.get_async("aio/slow"), timeout=0.2)
        assert waiting(client) == 0

    run(main())


def test_get_async_timeout_raises_timeout(client):
    async def main():
        with pytest.raises(tensorbroker.Timeout, match="'aio/absent' was not published within"):
            await client.get_async("aio/absent", timeout=0.1)
        with pytest.raises(tensorbroker.NotFound):
            await client.get_async("aio/absent", timeout=0)

    run(main())
    assert waiting(client) == 0


def test_cancellations_racing_publications_leave_no_lease(client):
    """Whichever comes first, the task either returns the tensor or is cancelled, and a
    cancelled one leaves nothing behind."""
    rounds, outcomes = 60, {"granted": 0, "cancelled": 0}
    rng = random.Random(15)

    async def one(i):
        name = f"aio/race/{i}"
        task = asyncio.create_task(client.get_async(name, timeout=HANG_GUARD))
        await asyncio.sleep(rng.random() * 0.002)
        put = asyncio.create_task(client.put_async(name, np.full(3, i)))
        await asyncio.sleep(rng.random() * 0.002)
        task.cancel()
        await put
        try:
            tensor = await task
        except asyncio.CancelledError:
            outcomes["cancelled"] += 1
        else:
            outcomes["granted"] += 1
            np.testing.assert_array_equal(np.asarray(tensor), np.full(3, i))
            tensor.release()
        assert client.stat(name)["leases"] == 0, name

    async def main():
        for i in range(rounds):
            await one(i)

    run(main())
    print(outcomes)
    assert sum(outcomes.values()) == rounds
    assert client.stats()["leases"] == 0 and waiting(client) == 0


def test_more_waits_than_threads_queue_and_all_complete(client):
    """80 waits on the default wait pool of 64 threads: 16 queue for a thread, none is lost,
    and the puts that answer them (on the call pool) are not held up behind them."""
    count = 80

    async def main():
        tasks = [asyncio.create_task(client.get_async(f"aio/many/{i}", timeout=HANG_GUARD))
                 for i in range(count)]
        await until(lambda: waiting(client) == 64, "64 waits in the daemon")
        for i in range(count):
            await client.put_async(f"aio/many/{i}", np.array([i]))
        return await asyncio.gather(*tasks)

    tensors = run(main())
    assert [int(np.asarray(t)[0]) for t in tensors] == list(range(count))
    for t in tensors:
        t.release()
    assert waiting(client) == 0


def test_create_async_and_seal_async_publish(client):
    async def main():
        made = await client.create_async("aio/made", (2, 2), "float32")
        np.asarray(made)[:] = 7
        await made.seal_async()
        return made

    made = run(main())
    assert made.sealed and client.stat("aio/made")["sealed"]
    np.testing.assert_array_equal(np.asarray(client.get("aio/made")), np.full((2, 2), 7))


def python_child(daemon, code, **env):
    """Runs `code` in a fresh interpreter (its own thread pool) against `daemon`."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), daemon.socket],
        env={**os.environ, **env}, capture_output=True, text=True, timeout=HANG_GUARD)


def test_a_cancelled_create_async_aborts_what_it_created(client):
    """create_async cancelled while its call is queued or running: the call still runs to its
    end, and then the tensor it made is aborted before CancelledError reaches the caller."""
    from tensorbroker import _aio

    release = threading.Event()
    pool = _aio._executor("call")
    blockers = [pool.submit(release.wait) for _ in range(_aio._CALL_THREADS)]

    async def main():
        create = asyncio.create_task(client.create_async("aio/made/cancelled", 4, "uint8"))
        await asyncio.sleep(0.05)  # create waits for a thread of the call pool
        create.cancel()
        waiter = asyncio.create_task(asyncio.wait({create}))
        await asyncio.sleep(0.05)
        assert not create.done(), "the cancellation waits for the call to end"
        release.set()
        await waiter
        assert create.cancelled()

    run(main())
    assert all(b.result(HANG_GUARD) for b in blockers)
    assert client.stats()["pending"] == 0 and client.stats()["leases"] == 0
    with pytest.raises(tensorbroker.NotFound):
        client.stat("aio/made/cancelled")


def test_waits_beyond_the_thread_count_queue(daemon):
    done = python_child(daemon, """
        import asyncio, sys, numpy as np, tensorbroker
        client = tensorbroker.connect(sys.argv[1])

        async def main():
            tasks = [asyncio.create_task(client.get_async(f"aio/two/{i}")) for i in range(3)]
            while client.stats()["waiting_gets"] < 2:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.1)
            print("waiting", client.stats()["waiting_gets"])  # the third waits for a thread
            for i in range(3):
                await client.put_async(f"aio/two/{i}", np.array([i]))
            print([int(np.asarray(t)[0]) for t in await asyncio.gather(*tasks)])

        asyncio.run(main())
    """, TENSORBROKER_ASYNC_THREADS="2")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["waiting 2", "[0, 1, 2]"]


def test_bad_thread_count_is_refused_by_name(daemon):
    done = python_child(daemon, """
        import asyncio, sys, tensorbroker
        client = tensorbroker.connect(sys.argv[1])
        try:
            asyncio.run(client.get_async("x", timeout=0))
        except ValueError as e:
            print(e)
    """, TENSORBROKER_ASYNC_THREADS="none")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "TENSORBROKER_ASYNC_THREADS: 'none' is not a positive integer\n"


def test_waits_left_running_do_not_hold_up_interpreter_exit(daemon, client):
    """A program that stops its loop with a get_async still waiting (no cancellation) exits:
    the waits are cancelled at exit, and the daemon is left with no waiter."""
    done = python_child(daemon, """
        import asyncio, sys, tensorbroker
        client = tensorbroker.connect(sys.argv[1])
        loop = asyncio.new_event_loop()
        loop.create_task(client.get_async("aio/exit/never"))

        async def until_waiting():  # the loop runs, the wait reaches the daemon
            while client.stats()["waiting_gets"] != 1:
                await asyncio.sleep(0.01)
        loop.run_until_complete(asyncio.wait_for(until_waiting(), 120))
        print("waiting", client.stats()["waiting_gets"], flush=True)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "waiting 1\n"
    wait_for(lambda: waiting(client) == 0, "the exited process's wait to end")


def test_async_server_example_serves_and_cancels_waits_of_requesters_who_hang_up(daemon, client):
    server = subprocess.Popen(
        [sys.executable, os.path.join(EXAMPLES, "async_server.py"), "--socket", daemon.socket,
         "--port", "0"], stdout=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        assert line.startswith("serving tensors on http://127.0.0.1:"), line
        port = int(line.split(":")[2].split("/")[0])

        # A requester that hangs up while waiting: its wait is cancelled in the daemon.
        quitter = http.client.HTTPConnection("127.0.0.1", port, timeout=HANG_GUARD)
        quitter.request("GET", "/tensors/demo/nobody?timeout=600")
        wait_for(lambda: waiting(client) == 1, "the server's wait for demo/nobody")
        quitter.close()
        wait_for(lambda: waiting(client) == 0, "the hung-up requester's wait to be cancelled")

        # Requesters that wait for a tensor published later, side by side.
        patient = [http.client.HTTPConnection("127.0.0.1", port, timeout=HANG_GUARD)
                   for _ in range(3)]
        for c in patient:
            c.request("GET", "/tensors/demo/frame?timeout=600")
        wait_for(lambda: waiting(client) == 3, "three waits for demo/frame")
        frame = np.arange(12, dtype=np.float32).reshape(3, 4)
        client.put("demo/frame", frame)
        for c in patient:
            response = c.getresponse()
            assert response.status == 200
            np.testing.assert_array_equal(np.load(io.BytesIO(response.read())), frame)
            c.close()

        late = http.client.HTTPConnection("127.0.0.1", port, timeout=HANG_GUARD)
        late.request("GET", "/tensors/demo/absent?timeout=0.1")
        response = late.getresponse()
        assert (response.status, response.read()) == (404, b"demo/absent: not published\n")
        wait_for(lambda: client.stat("demo/frame")["leases"] == 0, "the server's leases to end")
    finally:
        server.terminate()
        server.wait(HANG_GUARD)
