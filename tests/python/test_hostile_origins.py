"""What a broker believes of its origins (remote[PREFIX] = ADDRESS), against origins that lie or
stall: real tensorbrokerd processes (broker B, and broker-a as an honest origin) and hostile
origins (hostile_origin.py: gRPC servers with certificates the test CA signed, so they pass
mutual TLS as real brokers would).

- An origin changes only the replicas it sent: a Watch event of origin E about a replica that
  came from broker-a, or about a name outside E's prefix, is a protocol error of E, logged once
  and acted on never; an event about E's own replica is acted on.
- An origin announcing 8 GiB to a 64 MiB broker fails that fetch and evicts nothing.
- Four origins that drip their bytes hold two fetch slots each, never more, and an honest
  origin's fetch completes beside them.
- A dripping origin is cut after --fetch-stall-timeout, naming the peer and what it sent; the
  memory fetches in flight reserve stays within half of the capacity, so another origin's
  fetch past it fails at once and the broker's own tensors keep their room.
"""

import os
import re
import subprocess
import tempfile
import time
from concurrent import futures

import grpc
import pytest

from tensorbroker.v1 import broker_pb2 as pb

from hostile_origin import UINT8, HostileOrigin
from raw_daemon import RawDaemon, RawSession

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
PKI_SCRIPT = os.path.join(ROOT, "tests", "support", "make_test_pki.sh")
RPC_TIMEOUT = 60  # seconds; a hang guard, never a measurement
MIB = 1 << 20
NAMES = ["broker-a", "broker-b", "broker-e", "broker-d0", "broker-d1", "broker-d2", "broker-d3"]


@pytest.fixture(scope="module")
def pki():
    with tempfile.TemporaryDirectory(prefix="tbpki.") as directory:
        subprocess.run(["/bin/bash", PKI_SCRIPT, directory, *NAMES], check=True,
                       capture_output=True)
        yield directory


def tls(pki, name):
    return ["--tls-cert", f"{pki}/{name}.crt", "--tls-key", f"{pki}/{name}.key",
            "--tls-ca", f"{pki}/ca.crt"]


def wait_until(predicate, what, guard=RPC_TIMEOUT):
    deadline = time.monotonic() + guard
    while not predicate():
        assert time.monotonic() < deadline, f"waited {guard} s for {what}"
        time.sleep(0.02)


@pytest.fixture
def brokers(pki):
    """Starts daemons (start(...)) and hostile origins (hostile(...)); stops them all after."""
    started = []

    class Brokers:
        @staticmethod
        def origin():
            d = RawDaemon("--log-level", "info", "--peer-listen", "127.0.0.1:0",
                          *tls(pki, "broker-a"))
            started.append(d)
            wait_until(lambda: re.search(r"peers: serving on 127\.0\.0\.1:(\d+)", d.log()),
                       "the origin's peer port")
            d.peer_port = int(re.search(r"peers: serving on 127\.0\.0\.1:(\d+)", d.log()).group(1))
            return d

        @staticmethod
        def here(remotes, *flags):
            """Broker B, with remote[PREFIX] = 127.0.0.1:PORT for each of `remotes`."""
            config = os.path.join(tempfile.mkdtemp(prefix="tbconf."), "b.conf")
            with open(config, "w") as f:
                for prefix, port in remotes.items():
                    f.write(f"remote[{prefix}] = 127.0.0.1:{port}\n")
            d = RawDaemon("--log-level", "info", "--config", config, *tls(pki, "broker-b"),
                          *flags)
            started.append(d)
            return d

        @staticmethod
        def hostile(identity, **behaviour):
            h = HostileOrigin(pki, identity, **behaviour)
            started.append(h)
            return h

    yield Brokers
    for each in reversed(started):
        if isinstance(each, HostileOrigin):
            each.stop()
        else:
            each.stop()
            each.cleanup()


def put(stub, name, data):
    def messages():
        yield pb.PutRequest(header=pb.PutRequest.Header(name=name, dtype=UINT8, shape=[len(data)],
                                                        readers=["*"]))
        for at in range(0, len(data), MIB):
            yield pb.PutRequest(data=data[at:at + MIB])
    return stub.Put(messages(), timeout=RPC_TIMEOUT)


def read(stub, name):
    return b"".join(m.data for m in stub.Read(pb.ReadRequest(name=name), timeout=RPC_TIMEOUT))


def get(stub, session, name, wait_s=30):
    """A Get at B (a fetch when B holds no replica): the grant, or (code, details)."""
    try:
        return stub.Get(pb.GetRequest(session_id=session.id, name=name, wait_ms=wait_s * 1000),
                        timeout=wait_s + RPC_TIMEOUT)
    except grpc.RpcError as error:
        return error.code(), error.details()


def remote_row(stub, port):
    for row in stub.Stats(pb.StatsRequest(), timeout=RPC_TIMEOUT).remotes:
        if row.peer == f"127.0.0.1:{port}":
            return row
    return None


def deleted(name, version=10**15):
    return pb.WatchEvent(kind=pb.WatchEvent.DELETED, sequence=version, name=name, version=version)


def test_an_origin_changes_only_the_replicas_it_sent_and_a_huge_one_evicts_nothing(brokers):
    origin = brokers.origin()
    legit = bytes(range(256)) * 4096  # 1 MiB
    put(origin.stub, "w/a/legit", legit)
    liar = brokers.hostile(
        "broker-e", tensors={"w/bait": b"\x05" * 64}, announce={"w/huge": 8 << 30},
        # About broker-a's replica (under E's prefix, not E's), outside E's prefix, then E's own.
        watch_events=[deleted("w/a/legit"), deleted("v/elsewhere"), deleted("w/bait")])
    b = brokers.here({"w/": liar.port, "w/a/": origin.peer_port}, "--capacity", "64M")
    session = RawSession(b.stub)
    assert get(b.stub, session, "w/a/legit").info.nbytes == len(legit)
    assert get(b.stub, session, "w/bait").info.nbytes == 64  # B now follows E's Watch
    # E's own replica goes (events come in order: the two before it were seen by then).
    wait_until(lambda: "'s: deleted there at its version 1000000000000000)" in b.log(),
               "E's deletion of its own replica")
    assert b.stub.Stat(pb.StatRequest(name="w/a/legit"), timeout=RPC_TIMEOUT).nbytes == len(legit)
    assert read(b.stub, "w/a/legit") == legit
    errors = [line for line in b.log().splitlines() if "protocol error of the peer" in line]
    assert len(errors) == 1, errors  # the first is a warning, the later ones debug lines
    assert "'w/a/legit', whose replica here came from another peer" in errors[0], errors
    assert f"127.0.0.1:{liar.port}" in errors[0], errors

    # 8 GiB announced to a 64 MiB broker: that fetch fails, and nothing is evicted for it.
    code, details = get(b.stub, session, "w/huge")
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, details
    assert "fetches in flight may hold" in details, details
    assert read(b.stub, "w/a/legit") == legit
    row = remote_row(b.stub, origin.peer_port)
    assert (row.replicas, row.evictions) == (1, 0)
    session.close()


def test_an_honest_origins_fetch_completes_while_four_others_drip(brokers):
    origin = brokers.origin()
    legit = bytes(range(256)) * 4096
    put(origin.stub, "w/a/legit", legit)
    drippers = [brokers.hostile(f"broker-d{i}", announce={f"d{i}/x{j}": MIB for j in range(3)},
                                drip={f"d{i}/x{j}" for j in range(3)}) for i in range(4)]
    remotes = {f"d{i}/": d.port for i, d in enumerate(drippers)}
    remotes["w/a/"] = origin.peer_port
    # A stall timeout longer than the test: only the slots per origin let the honest fetch go.
    b = brokers.here(remotes, "--capacity", "64M", "--fetch-stall-timeout", "10m")
    session = RawSession(b.stub)
    pool = futures.ThreadPoolExecutor(max_workers=12)
    waiting = [pool.submit(get, b.stub, session, f"d{i}/x{j}", 120)
               for i in range(4) for j in range(3)]
    wait_until(lambda: all(d.open_reads() == 2 for d in drippers),
               "two fetches from each dripping origin")
    grant = get(b.stub, session, "w/a/legit")
    assert not isinstance(grant, tuple), grant
    assert grant.info.nbytes == len(legit)
    assert read(b.stub, "w/a/legit") == legit
    # The drippers still drip (none was cut), and none ever had more than its two slots.
    assert [d.open_reads() for d in drippers] == [2, 2, 2, 2]
    assert [d.most_reads_open for d in drippers] == [2, 2, 2, 2]
    session.close()
    b.stop()  # the waiting Gets end with the daemon
    pool.shutdown(wait=True)
    assert all(w.done() for w in waiting)


def test_a_dripping_origin_is_cut_and_fetches_hold_at_most_half_the_capacity(brokers):
    d0 = brokers.hostile("broker-d0", announce={"d0/big": 30 * MIB}, drip={"d0/big"})
    d1 = brokers.hostile("broker-d1", announce={"d1/big": 30 * MIB}, drip={"d1/big"})
    b = brokers.here({"d0/": d0.port, "d1/": d1.port}, "--capacity", "64M",
                     "--fetch-stall-timeout", "3s")
    session = RawSession(b.stub)
    pool = futures.ThreadPoolExecutor(max_workers=1)
    dripping = pool.submit(get, b.stub, session, "d0/big", 120)
    wait_until(lambda: b.stub.Stats(pb.StatsRequest(), timeout=RPC_TIMEOUT).used_bytes >= 30 * MIB,
               "the first fetch's memory")
    # Another origin's 30 MiB would make 60 of 64 MiB unevictable: refused at once.
    code, details = get(b.stub, session, "d1/big")
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, details
    assert "fetches in flight may hold 33554432 bytes together" in details, details
    # B's own tensors keep their room meanwhile.
    put(b.stub, "local/own", b"\x07" * (32 * MIB))
    code, details = dripping.result(timeout=RPC_TIMEOUT)
    assert code == grpc.StatusCode.UNAVAILABLE, details
    assert f"fetching 'd0/big' from peer 127.0.0.1:{d0.port}: too slow: it sent " in details
    assert f" of {30 * MIB} bytes in " in details and "(--fetch-stall-timeout)" in details
    wait_until(lambda: b.stub.Stats(pb.StatsRequest(), timeout=RPC_TIMEOUT).used_bytes == 32 * MIB,
               "the cut fetch's memory to come back")
    assert read(b.stub, "local/own") == b"\x07" * (32 * MIB)
    session.close()
