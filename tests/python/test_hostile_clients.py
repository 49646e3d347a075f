"""Clients that push tensorbrokerd to the sizes that broke it (issue 12), over raw gRPC with
stubs generated from broker.proto, the CLI and the Python package:

- 2,000 Gets waiting at once used to take a server thread each (400 exhausted the pool, and
  every call failed, the health check too). Now, while 2,000 wait, `tensorbroker health`, Ping
  and Stats answer and the daemon has no more threads than before give or take a few; a publish
  answers its waiter, the rest are cancelled, and the daemon is back to its threads and
  descriptors.
- Read sent chunks just over 4 MiB, so a gRPC client with default limits (4 MiB in) failed on
  any tensor over 4 MiB. Now chunks are at most 1 MiB: a default channel reads 12 MiB.
- Strides that spread one byte over a huge shape are refused (Read would stream all of it);
  Reads and Puts a client abandons give back their leases, reservations and names.
- 20,000 names made one 5.8 MB List reply, which `ls` and list() could not receive. Now List
  answers a page at a time (each reply well under 4 MiB); `ls`, `ls --json` and list() follow
  the pages and see every name.

The Python package and the generated stubs are both called `tensorbroker`, so package calls run
in child processes ($TENSORBROKER_PACKAGE_PATH on their PYTHONPATH). Loops are bounded; the
timeouts guard against hangs and measure nothing.
"""

import collections
import json
import os
import subprocess
import sys
import threading
import time

import grpc
import numpy as np
import pytest

from tensorbroker.v1 import broker_pb2 as pb
from tensorbroker.v1 import broker_pb2_grpc as pbg

from raw_daemon import RawDaemon, dies_with_test
from raw_grpc_example import RawClient

DAEMON = os.environ.get("TENSORBROKERD", "")
CLI = os.environ.get("TENSORBROKER_CLI", "")
PACKAGE_PATH = os.environ.get("TENSORBROKER_PACKAGE_PATH", "")


def package_env():
    """The environment of a child that imports the package: on its path, with the sanitizer
    runtime preloaded when the build is instrumented (TENSORBROKER_PYTHON_PRELOAD)."""
    assert PACKAGE_PATH, "set TENSORBROKER_PACKAGE_PATH to the build's python/ directory"
    env = dict(os.environ, PYTHONPATH=PACKAGE_PATH)
    preload = os.environ.get("TENSORBROKER_PYTHON_PRELOAD", "")
    if preload:
        env["LD_PRELOAD"] = preload
        env["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=1"  # CPython keeps memory at exit
    return env


MIB = 1 << 20
GRPC_DEFAULT_RECEIVE_LIMIT = 4 * MIB
HANG_GUARD = 120  # seconds; only against hangs, never a measurement
def serving():
    d = RawDaemon(prefix="tbhostile.")
    try:
        yield d
        assert d.stop(timeout=HANG_GUARD) == 0, "tensorbrokerd did not exit cleanly"
    finally:
        d.cleanup()


@pytest.fixture
def daemon():
    """A daemon of this test alone: its figures (clients, pending, leases, used bytes, its
    descriptors and threads) are this test's, whatever an earlier one left, failed or not."""
    yield from serving()


@pytest.fixture(scope="module")
def names_daemon():
    """The daemon many_names fills once for the tests that list them (they change nothing)."""
    yield from serving()


class Session:
    """An open Session stream; Gets carry its id."""

    def __init__(self, stub):
        self._done = threading.Event()

        def requests():
            yield pb.SessionRequest(hello=pb.SessionRequest.Hello(pid=os.getpid(),
                                                                  client_name="hostile"))
            # Bounded: a session a failed test never closed must not keep pytest from exiting.
            self._done.wait(HANG_GUARD * 2)

        self._events = stub.Session(requests())
        self.id = next(self._events).opened.session_id
        assert self.id

    def close(self):
        self._done.set()
        self._events.cancel()


FLOAT32 = pb.DataType(code=2, bits=32, lanes=1)
UINT8 = pb.DataType(code=1, bits=8, lanes=1)


def put(stub, name, array, dtype=FLOAT32, chunk=MIB):
    def messages():
        yield pb.PutRequest(header=pb.PutRequest.Header(name=name, dtype=dtype,
                                                        shape=list(array.shape)))
        data = array.tobytes()
        for start in range(0, len(data), chunk):
            yield pb.PutRequest(data=data[start:start + chunk])
    return stub.Put(messages(), timeout=HANG_GUARD)


def package(daemon, script, *args):
    """Runs `script` in a child Python that imports the tensorbroker package; its stdout."""
    env = package_env()
    done = subprocess.run([sys.executable, "-c", script, daemon.socket, *args], env=env,
                          capture_output=True, text=True, timeout=HANG_GUARD)
    assert done.returncode == 0, done.stderr
    return done.stdout


def cli(daemon, *args):
    assert CLI and os.path.exists(CLI), "set TENSORBROKER_CLI to the tensorbroker binary"
    return subprocess.run([CLI, "--socket", daemon.socket, *args], capture_output=True, text=True,
                          timeout=HANG_GUARD)


def resources(pid):
    """(open descriptors, threads) of process `pid`."""
    return len(os.listdir(f"/proc/{pid}/fd")), len(os.listdir(f"/proc/{pid}/task"))


def settled_resources(pid):
    """resources(pid) once five readings 0.2 s apart agree (threads start and stop lazily)."""
    readings = collections.deque(maxlen=5)
    deadline = time.monotonic() + HANG_GUARD
    while len(readings) < 5 or len(set(readings)) > 1:
        assert time.monotonic() < deadline, f"resources of {pid} never settled: {list(readings)}"
        readings.append(resources(pid))
        time.sleep(0.2)
    return readings[-1]


def poll(predicate, what):
    """Polls `predicate` until it is true; fails after HANG_GUARD seconds."""
    deadline = time.monotonic() + HANG_GUARD
    while not (result := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return result


def get_calls(stub):
    """{grpc status code: count} of the Get calls the daemon has answered."""
    stats = stub.Stats(pb.StatsRequest(), timeout=HANG_GUARD)
    for method in stats.methods:
        if method.method == "Get":
            return {c.code: c.count for c in method.calls}
    return {}


# ---- 2,000 waiting Gets hold no thread ------------------------------------------------------

WAITERS = 2000
CHANNELS = 20  # 100 calls on each connection: within any server's limit on concurrent streams
# Threads the daemon may add while 2,000 Gets wait: gRPC's executor grows to two threads a core
# under a burst of calls (and keeps them), its timer manager by one or two. A thread per
# waiting call would be 2,000.
THREAD_SLACK = 16 + 2 * os.cpu_count()
CANCELLED = grpc.StatusCode.CANCELLED.value[0]
OK = grpc.StatusCode.OK.value[0]


def start_waiting(stubs, session, prefix):
    """WAITERS Gets with wait_ms=60000 for names never published, spread over `stubs`; returns
    their futures once every one has reached the daemon."""
    futures = [stubs[i % len(stubs)].Get.future(
        pb.GetRequest(session_id=session.id, name=f"{prefix}/{i}", wait_ms=60000),
        timeout=HANG_GUARD) for i in range(WAITERS)]
    for s in stubs:  # a Ping behind the Gets on each connection: they have all arrived
        s.Ping(pb.Empty(), timeout=HANG_GUARD)
    return futures


def check_serving(daemon, futures, baseline):
    """While `futures` wait: health, Ping and Stats answer, and the daemon's threads stay
    within THREAD_SLACK of `baseline`, its descriptors at it."""
    # Counted first: the health check's own connection is closed by the daemon only when it
    # notices the CLI has gone.
    fds, threads = resources(daemon.pid)
    assert threads <= baseline[1] + THREAD_SLACK, (baseline, (fds, threads))
    assert fds == baseline[0], "waiting Gets opened descriptors"
    health = cli(daemon, "health", "--timeout", "30")
    assert (health.returncode, health.stdout.strip()) == (0, "SERVING"), health.stderr
    assert daemon.stub.Ping(pb.Empty(), timeout=HANG_GUARD) == pb.Empty()
    stats = daemon.stub.Stats(pb.StatsRequest(), timeout=HANG_GUARD)
    assert stats.clients == 1
    assert not any(f.done() for f in futures), "a Get answered before its name existed"


def cancel_all(stub, futures, calls_before):
    """Cancels `futures`; returns once the daemon has answered every one as CANCELLED, which
    shows that each was waiting there."""
    assert all(f.cancel() for f in futures)
    poll(lambda: get_calls(stub).get(CANCELLED, 0) - calls_before.get(CANCELLED, 0)
         == len(futures), f"the daemon to count {len(futures)} cancelled Gets")


def test_2000_waiting_gets_hold_no_thread_and_leave_nothing_behind(daemon):
    stub = daemon.stub
    session = Session(stub)
    channels = []
    futures = []
    try:
        # One tensor first, so that the CPU pool's segment (one descriptor) exists before the
        # baseline and the tensor published later shares it.
        put(stub, "warm/first", np.zeros(4, np.float32))
        channels = [grpc.insecure_channel("unix:" + daemon.socket,
                                          options=[("grpc.use_local_subchannel_pool", 1)])
                    for _ in range(CHANNELS)]
        stubs = [pbg.BrokerStub(channel) for channel in channels]
        for s in stubs:  # every connection up before the baseline
            s.Ping(pb.Empty(), timeout=HANG_GUARD)
        initial = settled_resources(daemon.pid)

        # A first burst: gRPC's own pools grow to their size for it (and stay so).
        calls_before = get_calls(stub)
        futures = start_waiting(stubs, session, "first")
        check_serving(daemon, futures, initial)
        cancel_all(stub, futures, calls_before)
        baseline = settled_resources(daemon.pid)
        assert baseline[0] == initial[0] and baseline[1] <= initial[1] + THREAD_SLACK

        # The second burst takes nothing more, and gives everything back.
        calls_before = get_calls(stub)
        futures = start_waiting(stubs, session, "never")
        check_serving(daemon, futures, baseline)
        # Publishing one name answers its waiter, and only it.
        published = np.arange(6, dtype=np.float32) * np.float32(1.5)
        put(stub, "never/1234", published)
        grant = futures[1234].result(timeout=HANG_GUARD)
        assert grant.info.name == "never/1234" and list(grant.info.shape) == [6]
        assert grant.lease_id != 0 and grant.region.nbytes == published.nbytes
        stub.Release(pb.ReleaseRequest(session_id=session.id, lease_id=grant.lease_id),
                     timeout=HANG_GUARD)
        assert sum(f.done() for f in futures) == 1
        cancel_all(stub, [f for i, f in enumerate(futures) if i != 1234], calls_before)
        assert get_calls(stub).get(OK, 0) - calls_before.get(OK, 0) == 1
        # Descriptors exactly as before; threads within gRPC's own slack (its executor keeps or
        # lets go of idle threads as it likes; a thread per waiter would be 2,000).
        poll(lambda: resources(daemon.pid)[0] == baseline[0]
             and resources(daemon.pid)[1] <= baseline[1] + THREAD_SLACK,
             f"descriptors back to {baseline[0]} and threads within {THREAD_SLACK} of "
             f"{baseline[1]} (now {resources(daemon.pid)})")

        # A new Get still works, at once and after a wait.
        now = stub.Get(pb.GetRequest(session_id=session.id, name="never/1234"),
                       timeout=HANG_GUARD)
        assert now.info.name == "never/1234"
        later = stub.Get.future(pb.GetRequest(session_id=session.id, name="never/later",
                                              wait_ms=60000), timeout=HANG_GUARD)
        stub.Ping(pb.Empty(), timeout=HANG_GUARD)
        assert not later.done()
        put(stub, "never/later", np.ones(3, np.float32))
        assert later.result(timeout=HANG_GUARD).info.name == "never/later"
    finally:
        for f in futures:
            f.cancel()
        for channel in channels:
            channel.close()
        session.close()
    assert stub.Ping(pb.Empty(), timeout=HANG_GUARD) == pb.Empty()


# ---- Read in chunks of at most 1 MiB ----------------------------------------------------------

PUT_12MIB = """
import sys, numpy as np, tensorbroker
client = tensorbroker.connect(sys.argv[1])
client.put(sys.argv[2], np.arange(3 << 20, dtype=np.float32))
"""


def test_a_default_channel_reads_a_12_mib_tensor_in_1_mib_chunks(daemon):
    package(daemon, PUT_12MIB, "big/12mib")
    expected = np.arange(3 << 20, dtype=np.float32).tobytes()
    # No options: gRPC's default receive limit (4 MiB), as any client starts out.
    with grpc.insecure_channel("unix:" + daemon.socket) as channel:
        stub = pbg.BrokerStub(channel)
        messages = list(stub.Read(pb.ReadRequest(name="big/12mib"), timeout=HANG_GUARD))
    assert [len(m.data) for m in messages] == [MIB] * 12
    assert all(m.ByteSize() < GRPC_DEFAULT_RECEIVE_LIMIT for m in messages)
    assert messages[0].info.name == "big/12mib" and messages[0].info.nbytes == 12 * MIB
    assert not any(m.HasField("info") for m in messages[1:])
    assert b"".join(m.data for m in messages) == expected


def test_an_odd_size_reads_back_in_1_mib_chunks_and_a_tail(daemon):
    data = np.random.default_rng(12).integers(0, 256, 5 * MIB + 3, dtype=np.uint8)
    with grpc.insecure_channel("unix:" + daemon.socket) as channel:
        stub = pbg.BrokerStub(channel)
        # Put chunks of 4 MiB, the most the proto allows, from a default channel too.
        put(stub, "big/odd", data, dtype=UINT8, chunk=4 * MIB)
        messages = list(stub.Read(pb.ReadRequest(name="big/odd"), timeout=HANG_GUARD))
    assert [len(m.data) for m in messages] == [MIB] * 5 + [3]
    assert b"".join(m.data for m in messages) == data.tobytes()


def test_the_docs_raw_client_maps_a_12_mib_tensor(daemon):
    # docs/grpc.md's example reaches bytes through Get and the local channel (no Read), so its
    # tensor's size never meets a gRPC message limit; run it on the 12 MiB tensor all the same.
    package(daemon, PUT_12MIB, "big/raw")
    client = RawClient(daemon.socket)
    try:
        array, lease_id = client.get("big/raw")
        np.testing.assert_array_equal(array, np.arange(3 << 20, dtype=np.float32))
        del array
        client.release(lease_id)
    finally:
        client.close()


def test_strides_make_no_tensor_larger_than_capacity(daemon):
    """A few bytes that strides spread over a huge shape would have Read stream all of it: the
    logical size must fit in the capacity. Within it, Read sends the broadcast compactly, in
    1 MiB chunks."""
    stub = daemon.stub
    session = Session(stub)
    try:
        with pytest.raises(grpc.RpcError) as error:
            stub.Create(pb.CreateRequest(session_id=session.id, name="strided/huge", dtype=UINT8,
                                         shape=[1 << 50], strides=[0]), timeout=HANG_GUARD)
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error.value.details().startswith("shape: "), error.value.details()
        grant = stub.Create(pb.CreateRequest(session_id=session.id, name="strided/4mib",
                                             dtype=UINT8, shape=[4 * MIB], strides=[0]),
                            timeout=HANG_GUARD)
        assert grant.info.nbytes == 1
        stub.Seal(pb.SealRequest(session_id=session.id, name="strided/4mib"), timeout=HANG_GUARD)
        with grpc.insecure_channel("unix:" + daemon.socket) as channel:
            messages = list(pbg.BrokerStub(channel).Read(pb.ReadRequest(name="strided/4mib"),
                                                         timeout=HANG_GUARD))
        assert [len(m.data) for m in messages] == [MIB] * 4
        assert len(set(b"".join(m.data for m in messages))) == 1  # one element, broadcast
    finally:
        session.close()


def abandon_streams(stub, round_):
    """Starts 50 Reads of big/abandoned and takes one chunk of each, and 50 Puts of 2 MiB that
    send half their bytes and stall; checks what they hold, cancels them all, and returns once
    the daemon has given everything back."""
    before = stub.Stats(pb.StatsRequest(), timeout=HANG_GUARD)
    reads = [stub.Read(pb.ReadRequest(name="big/abandoned"), timeout=HANG_GUARD)
             for _ in range(50)]
    for r in reads:
        assert len(next(r).data) == MIB
    assert stub.Stat(pb.StatRequest(name="big/abandoned"), timeout=HANG_GUARD).leases == 50

    stalled = threading.Event()

    def stalling_put(i):
        yield pb.PutRequest(header=pb.PutRequest.Header(
            name=f"big/stalled/{round_}/{i}", dtype=UINT8, shape=[2 * MIB]))
        yield pb.PutRequest(data=bytes(MIB))
        stalled.wait(HANG_GUARD)

    puts = [stub.Put.future(stalling_put(i), timeout=HANG_GUARD) for i in range(50)]
    poll(lambda: stub.Stats(pb.StatsRequest(), timeout=HANG_GUARD).pending == 50,
         "50 Puts pending")
    for r in reads:
        r.cancel()
    for f in puts:
        assert f.cancel()
    stalled.set()

    def given_back():
        stats = stub.Stats(pb.StatsRequest(), timeout=HANG_GUARD)
        return (stats.pending, stats.leases, stats.used_bytes) == (0, 0, before.used_bytes)
    poll(given_back, "pending Puts aborted and Read leases released")
    assert stub.Stat(pb.StatRequest(name="big/abandoned"), timeout=HANG_GUARD).leases == 0
    for i in (0, 49):  # their names are free
        with pytest.raises(grpc.RpcError) as error:
            stub.Stat(pb.StatRequest(name=f"big/stalled/{round_}/{i}"), timeout=HANG_GUARD)
        assert error.value.code() == grpc.StatusCode.NOT_FOUND
        put(stub, f"big/stalled/{round_}/{i}", np.zeros(2, np.float32))


def test_abandoned_reads_and_puts_give_back_leases_and_reservations(daemon):
    """Streams a client starts and walks away from: each Read holds a lease (and one chunk),
    each Put a reservation, until the client cancels; then all of it is given back. The first
    round may leave idle segments in the pool (kept for reuse); the second leaves nothing."""
    stub = daemon.stub
    put(stub, "big/abandoned", np.arange(3 << 20, dtype=np.float32))
    abandon_streams(stub, 1)
    after_first = settled_resources(daemon.pid)
    segments = stub.Stats(pb.StatsRequest(), timeout=HANG_GUARD).segments
    abandon_streams(stub, 2)
    # Descriptors exactly as after the first round; threads within gRPC's own slack.
    poll(lambda: resources(daemon.pid)[0] == after_first[0]
         and resources(daemon.pid)[1] <= after_first[1] + THREAD_SLACK,
         f"descriptors back to {after_first[0]} and threads within {THREAD_SLACK} of "
         f"{after_first[1]} (now {resources(daemon.pid)})")
    assert stub.Stats(pb.StatsRequest(), timeout=HANG_GUARD).segments == segments


# ---- 20,000 names: List a page at a time ---------------------------------------------------------

NAMES = 20000
PRODUCERS = 4

PUT_MANY = """
import sys, numpy as np, tensorbroker
client = tensorbroker.connect(sys.argv[1])
first, count = int(sys.argv[2]), int(sys.argv[3])
value = np.zeros(2, np.float32)
for i in range(first, first + count):
    client.put(f"many/{i:05d}", value)
"""

COUNT_LIST = """
import json, sys, tensorbroker
names = [t["name"] for t in tensorbroker.connect(sys.argv[1]).list(sys.argv[2])]
print(json.dumps({"count": len(names), "unique": len(set(names)), "sorted": names == sorted(names),
                  "first": names[:1], "last": names[-1:]}))
"""


@pytest.fixture(scope="module")
def many_names(names_daemon):
    """20,000 published names, many/00000 .. many/19999, put by a few package processes on
    names_daemon."""
    daemon = names_daemon
    env = package_env()
    share = NAMES // PRODUCERS
    producers = [subprocess.Popen([sys.executable, "-c", PUT_MANY, daemon.socket, str(p * share),
                                   str(share)], env=env, stderr=subprocess.PIPE, text=True,
                                  preexec_fn=dies_with_test())
                 for p in range(PRODUCERS)]
    for p in producers:
        _, err = p.communicate(timeout=HANG_GUARD * 2)
        assert p.returncode == 0, err
    return [f"many/{i:05d}" for i in range(NAMES)]


def test_raw_list_answers_pages_under_4_mib(names_daemon, many_names):
    daemon = names_daemon
    # A connection of its own (a local subchannel pool: gRPC would otherwise reuse the module
    # channel's): that one has been idle while the producers put 20,000 names, longer than the
    # daemon's handshake timeout, and the daemon closes idle connections; a call that races that
    # close fails with UNAVAILABLE ("Broken pipe").
    with grpc.insecure_channel("unix:" + daemon.socket,
                               options=[("grpc.use_local_subchannel_pool", 1)]) as channel:
        list_pages(pbg.BrokerStub(channel), many_names)


def list_pages(stub, many_names):
    first = stub.List(pb.ListRequest(prefix="many/"), timeout=HANG_GUARD)
    assert len(first.tensors) == 500  # page_size 0: the default page
    assert first.ByteSize() < GRPC_DEFAULT_RECEIVE_LIMIT
    assert first.next_page_token
    largest = stub.List(pb.ListRequest(prefix="many/", page_size=5000), timeout=HANG_GUARD)
    assert len(largest.tensors) == 1000  # more than 1000 reads as 1000
    assert largest.ByteSize() < GRPC_DEFAULT_RECEIVE_LIMIT

    names, token, pages = [], "", 0
    while pages == 0 or token:
        assert pages < NAMES // 1000 + 1, "List did not stop"
        page = stub.List(pb.ListRequest(prefix="many/", page_size=1000, page_token=token),
                         timeout=HANG_GUARD)
        assert page.ByteSize() < GRPC_DEFAULT_RECEIVE_LIMIT
        names += [t.name for t in page.tensors]
        token, pages = page.next_page_token, pages + 1
    assert names == many_names
    assert pages in (NAMES // 1000, NAMES // 1000 + 1)  # a last, empty page is allowed


def test_cli_ls_prints_every_name(names_daemon, many_names):
    daemon = names_daemon
    done = cli(daemon, "ls", "many/")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == NAMES + 1
    assert lines[0].split()[0] == "NAME"
    assert [line.split()[0] for line in lines[1:]] == many_names

    done = cli(daemon, "ls", "many/", "--json")
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    assert [t["name"] for t in listed] == many_names
    assert {(tuple(t["shape"]), t["dtype"]) for t in listed} == {((2,), "float32")}

    everything = cli(daemon, "ls")
    assert everything.returncode == 0, everything.stderr
    assert sum(line.startswith("many/") for line in everything.stdout.splitlines()) == NAMES


def test_package_list_returns_every_name(names_daemon, many_names):
    daemon = names_daemon
    got = json.loads(package(daemon, COUNT_LIST, "many/"))
    assert got == {"count": NAMES, "unique": NAMES, "sorted": True, "first": [many_names[0]],
                   "last": [many_names[-1]]}
    got = json.loads(package(daemon, COUNT_LIST, "many/1"))
    assert (got["count"], got["first"], got["last"]) == (10000, ["many/10000"], ["many/19999"])
