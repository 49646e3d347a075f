"""Streams of versions of one name (issue 17): get(after_version=...) follows a producer from
another process, keep=N keeps a history readable by number, oldest=True steps through it.
A real daemon, real second processes, real shared memory: every frame is a uint64 array
stamped in every element, so a torn frame shows."""

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

import tensorbroker

from conftest import HERE, dies_with_test, wait_for

FRAME = 512  # uint64 elements: 4 KiB frames


def publish(client, name, stamp, keep=1):
    """One frame stamped `stamp` in every element; returns the version it got."""
    with client.create(name, FRAME, "uint64", replace=True, keep=keep) as t:
        np.asarray(t)[:] = stamp
        t.seal()
        return t.version


def start_follower(daemon, name, last, *extra):
    proc = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "stream_follower.py"), daemon.socket, name,
         str(last), *extra],
        stdout=subprocess.PIPE, text=True, preexec_fn=dies_with_test(signal.SIGKILL))
    assert json.loads(proc.stdout.readline()) == {"ready": True}
    return proc


def finish(proc):
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    return json.loads(out.strip().splitlines()[-1])


def test_a_follower_sees_strictly_increasing_versions_and_never_a_torn_frame(daemon, client):
    # The follower waits for the first version, then follows 1,000 of them from its process.
    follower = start_follower(daemon, "st/follow", 1000)
    stamps = {}
    for stamp in range(1, 1001):
        stamps[publish(client, "st/follow", stamp)] = stamp
    report = finish(follower)
    assert report["torn"] == []
    versions = [v for v, _ in report["seen"]]
    assert versions == sorted(set(versions)), "strictly increasing"
    # Each version it read holds the frame published as that version.
    assert all(stamps[v] == stamp for v, stamp in report["seen"])
    assert report["seen"][-1] == [max(stamps), 1000]
    client.delete("st/follow")


def test_with_a_history_as_long_as_the_stream_every_version_is_readable(daemon, client):
    versions = [publish(client, "st/history", stamp, keep=1000) for stamp in range(1000)]
    info = client.stat("st/history")
    assert info["keep"] == 1000
    assert info["kept_versions"] == versions
    assert info["version"] == versions[-1]
    for stamp, version in enumerate(versions):
        with client.get("st/history", version=version) as t:
            assert t.version == version
            assert (np.asarray(t) == stamp).all()
    # One more: the oldest drops out of the history.
    versions.append(publish(client, "st/history", 1000, keep=1000))
    assert client.stat("st/history")["kept_versions"] == versions[1:]
    with pytest.raises(tensorbroker.NotFound, match=f"does not keep version {versions[0]}"):
        client.get("st/history", version=versions[0])
    client.delete("st/history")
    # Nothing held any more (an administrator lists users holding something; others their own).
    assert [u["tensors"] for u in client.stats()["users"]] in ([], [0])


def test_a_history_reader_steps_through_every_kept_version(daemon, client):
    # The producer is ahead: 20 versions kept; the reader with oldest=True reads them in order.
    versions = [publish(client, "st/every", stamp, keep=20) for stamp in range(20)]
    reader = start_follower(daemon, "st/every", 19, "--oldest")
    report = finish(reader)
    assert report["torn"] == []
    assert report["seen"] == [[v, stamp] for stamp, v in enumerate(versions)]
    client.delete("st/every")


def test_after_version_waits_for_a_newer_version(daemon, client):
    v1 = publish(client, "st/wait", 1)
    with pytest.raises(tensorbroker.NotFound, match=f"has no version after {v1}"):
        client.get("st/wait", timeout=0, after_version=v1)
    with pytest.raises(tensorbroker.Timeout, match=f"not published after version {v1}"):
        client.get("st/wait", timeout=0.2, after_version=v1)
    with client.get("st/wait", after_version=v1 - 1) as t:
        assert t.version == v1
    v2 = publish(client, "st/wait", 2)
    with client.get("st/wait", timeout=5, after_version=v1) as t:
        assert (t.version, int(np.asarray(t)[0])) == (v2, 2)
    with pytest.raises(tensorbroker.InvalidArgument, match="either a version or an after_version"):
        client.get("st/wait", version=v2, after_version=v1)
    with pytest.raises(tensorbroker.InvalidArgument, match="keep"):
        client.put("st/wait", np.zeros(4), replace=True, keep=1025)
    client.delete("st/wait")
    assert client.stats()["waiting_gets"] == 0


def test_watch_yields_every_event_under_its_prefix_and_event_get_reads_it(daemon, client):
    with client.watch("st/w/") as watch:
        assert client.stats()["watchers"] == 1
        v1 = publish(client, "st/w/a", 1, keep=2)
        publish(client, "st/other", 1)
        v2 = publish(client, "st/w/a", 2, keep=2)
        v3 = publish(client, "st/w/a", 3, keep=2)
        client.delete("st/w/a")
        events = [next(watch) for _ in range(5)]
        assert [(e.kind, e.name, e.version) for e in events] == [
            ("published", "st/w/a", v1), ("replaced", "st/w/a", v2),
            ("replaced", "st/w/a", v3), ("expired", "st/w/a", v1), ("deleted", "st/w/a", v3)]
        assert events[1].previous_version == v1 and events[1].info["shape"] == [FRAME]
        assert watch.last_sequence == events[-1].sequence
        assert watch.next(timeout=0.05) is None
        # An event names a version; get() reads it while the name keeps it.
        v4 = publish(client, "st/w/b", 4)
        event = watch.next(timeout=10)
        with event.get() as t:
            assert (t.version, int(np.asarray(t)[0])) == (v4, 4)
        client.delete("st/w/b")
        assert watch.next(timeout=10).kind == "deleted"
        with pytest.raises(tensorbroker.NotFound):
            event.get()
    assert watch.closed
    wait_for(lambda: client.stats()["watchers"] == 0, "the watch to end in the daemon")
    with pytest.raises(tensorbroker.InvalidArgument, match="prefix"):
        client.watch("bad prefix")


def test_a_watch_resumes_after_a_sequence_and_close_ends_a_waiting_iteration(daemon, client):
    import threading

    versions = [publish(client, "st/r/x", i) for i in range(3)]
    with client.watch("st/r/", after_version=versions[0]) as watch:
        assert [e.version for e in (next(watch), next(watch))] == versions[1:]
        got = []
        reader = threading.Thread(target=lambda: got.extend(watch))  # ends when closed
        reader.start()
        watch.close()
        reader.join(timeout=30)
        assert not reader.is_alive() and got == []
    client.delete("st/r/x")


def test_async_for_follows_a_watch_and_cancelling_ends_it(daemon, client):
    import asyncio

    async def main():
        watch = client.watch("st/a/")
        seen = []

        async def follow():
            async for event in watch:
                seen.append(event.version)
                if len(seen) == 2:
                    return

        task = asyncio.create_task(follow())
        versions = [publish(client, "st/a/x", i) for i in range(2)]
        await asyncio.wait_for(task, 30)
        assert seen == versions
        # A task waiting in the watch: cancelling it closes the watch.
        waiting = asyncio.create_task(watch.__anext__())
        await asyncio.sleep(0.1)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert watch.closed

    asyncio.run(main())
    wait_for(lambda: client.stats()["watchers"] == 0, "the watch to end in the daemon")
    client.delete("st/a/x")
