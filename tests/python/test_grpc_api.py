"""The tensorbroker.v1 gRPC API driven from Python with stubs generated from broker.proto.

Starts tensorbrokerd ($TENSORBROKERD) on a private socket and checks, from another language:
Ping; the standard grpc.health.v1 service; a client-streamed Put of a numpy array in 1 MiB chunks; List with a prefix; Stat fields;
Read streaming the same bytes back; a Session stream whose id lets Get return a MemoryRegion
whose segment Python receives as a read-only descriptor on the local channel (socket.recv_fds),
maps and compares with numpy (zero copy), then Release; docs/grpc.md's raw-gRPC client, run as
written; a Python producer writing through a writable descriptor; exact error codes; leases
reclaimed when the session stream ends; and SIGTERM ending the daemon with status 0 and nothing
left behind.
"""

import errno
import mmap
import os
import signal
import socket
import time

import grpc
import numpy as np
import pytest

from tensorbroker.v1 import broker_pb2 as pb
from tensorbroker.v1 import local_pb2 as lpb
from tb_health import health_pb2, health_pb2_grpc

from raw_daemon import RawDaemon, RawSession
from raw_grpc_example import RawClient

GRPC_DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "grpc.md")

FLOAT32 = pb.DataType(code=2, bits=32, lanes=1)
MIB = 1 << 20
RPC_TIMEOUT = 30  # seconds; a hang guard, never a measurement


Session = RawSession


@pytest.fixture
def daemon():
    """A daemon of this test alone: what an earlier test published, held or left waiting
    (failed or not) is never in it, so its figures (Stats) are this test's own."""
    d = RawDaemon()
    yield d
    d.cleanup()


@pytest.fixture()
def stub(daemon):
    return daemon.stub


def put_messages(name, array, dtype=FLOAT32, chunk=MIB, replace=False, mutable=False):
    yield pb.PutRequest(header=pb.PutRequest.Header(
        name=name, dtype=dtype, shape=list(array.shape), replace=replace, mutable=mutable))
    data = array.tobytes()
    for start in range(0, len(data), chunk):
        yield pb.PutRequest(data=data[start:start + chunk])


def put(stub, name, array, **kwargs):
    return stub.Put(put_messages(name, array, **kwargs), timeout=RPC_TIMEOUT)


def read(stub, name):
    info, data = None, b""
    for i, message in enumerate(stub.Read(pb.ReadRequest(name=name), timeout=RPC_TIMEOUT)):
        if i == 0:
            info = message.info
        data += message.data
    return info, data


def rpc_code(call, *args, **kwargs):
    with pytest.raises(grpc.RpcError) as error:
        call(*args, timeout=RPC_TIMEOUT, **kwargs)
    return error.value.code(), error.value.details()


class LocalChannel:
    """The local channel beside the gRPC socket: one LocalRequest per datagram, descriptors
    beside the replies (SCM_RIGHTS)."""

    def __init__(self, daemon, session_id):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.settimeout(RPC_TIMEOUT)
        self.sock.connect(daemon.socket + ".fd")
        self.next_id = 1
        reply, _ = self.call(lpb.LocalRequest(
            attach=lpb.LocalRequest.Attach(session_id=session_id)))
        assert reply.code == 0, reply.message

    def call(self, request):
        request.request_id = self.next_id
        self.next_id += 1
        self.sock.sendmsg([request.SerializeToString()])
        data, fds, _, _ = socket.recv_fds(self.sock, 1 << 18, 16)
        reply = lpb.LocalReply.FromString(data)
        assert reply.request_id == request.request_id
        assert len(fds) == len(reply.descriptors)
        return reply, fds

    def fetch(self, lease_id):
        """(descriptor message, fd) of the segment `lease_id` is in."""
        reply, fds = self.call(lpb.LocalRequest(
            fetch_segment=lpb.LocalRequest.FetchSegment(lease_id=lease_id)))
        assert reply.code == 0, reply.message
        assert len(fds) == 1
        return reply.descriptors[0], fds[0]

    def close(self):
        self.sock.close()


def segments_of(pid):
    """The memory files process `pid` maps or holds open that are the daemon's kind (memfds)
    or named shared memory (/dev/shm), as /proc shows them: {"memfd": names, "named": paths}."""
    targets = set()
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6:
                targets.add(fields[5].strip())
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            targets.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except FileNotFoundError:  # closed meanwhile
            pass
    targets = {t[:-len(" (deleted)")] if t.endswith(" (deleted)") else t for t in targets}
    return {"memfd": {t[len("/memfd:"):] for t in targets if t.startswith("/memfd:tb-")},
            "named": {t for t in targets if t.startswith("/dev/shm/")}}


ARRAY = np.arange(3 * MIB // 4, dtype=np.float32).reshape(768, 1024) * np.float32(0.5)


@pytest.fixture
def array(stub):
    """py/array: ARRAY, put as test_put_streams_header_then_1mib_chunks checks."""
    put(stub, "py/array", ARRAY)


@pytest.fixture
def listed(stub):
    """py/list/a, py/list/b and pyother/c, put as test_list_with_prefix checks."""
    put(stub, "py/list/a", np.zeros(4, np.float32))
    put(stub, "py/list/b", np.ones(2, np.float32))
    put(stub, "pyother/c", np.ones(1, np.float32))


def test_ping(stub):
    assert stub.Ping(pb.Empty(), timeout=RPC_TIMEOUT) == pb.Empty()


def test_standard_health_service_reports_serving(daemon):
    with grpc.insecure_channel("unix:" + daemon.socket) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        reply = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=RPC_TIMEOUT)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_put_streams_header_then_1mib_chunks(stub):
    info = put(stub, "py/array", ARRAY)
    assert info.name == "py/array"
    assert list(info.shape) == [768, 1024]
    assert info.nbytes == ARRAY.nbytes == 3 * MIB
    assert info.sealed


def test_list_with_prefix(stub, array, listed):
    names = sorted(t.name for t in stub.List(pb.ListRequest(prefix="py/list/"),
                                            timeout=RPC_TIMEOUT).tensors)
    assert names == ["py/list/a", "py/list/b"]
    everything = {t.name for t in stub.List(pb.ListRequest(), timeout=RPC_TIMEOUT).tensors}
    assert {"py/array", "py/list/a", "py/list/b", "pyother/c"} <= everything
    by_py = {t.name for t in stub.List(pb.ListRequest(prefix="py"), timeout=RPC_TIMEOUT).tensors}
    assert "pyother/c" in by_py and "py/list/a" in by_py  # a partial segment is a prefix too


def test_stat_fields(stub, array):
    info = stub.Stat(pb.StatRequest(name="py/array"), timeout=RPC_TIMEOUT)
    assert info.name == "py/array"
    assert (info.dtype.code, info.dtype.bits, info.dtype.lanes) == (2, 32, 1)
    assert list(info.shape) == [768, 1024]
    assert list(info.strides) == [1024, 1]
    assert info.nbytes == 3 * MIB
    assert (info.device.device_type, info.device.device_id) == (1, 0)
    assert info.sealed
    assert not info.mutable
    assert info.version > 0
    assert info.leases == 0
    assert info.created_unix_ms > 1_600_000_000_000


def test_read_streams_the_same_bytes(stub, array):
    info, data = read(stub, "py/array")
    assert info.name == "py/array"
    assert list(info.shape) == [768, 1024]
    assert data == ARRAY.tobytes()
    assert info.nbytes == len(data)


def test_get_with_session_then_map_the_segment_from_python(daemon, stub, array):
    session = Session(stub)
    local = LocalChannel(daemon, session.id)
    try:
        grant = stub.Get(pb.GetRequest(session_id=session.id, name="py/array"),
                         timeout=RPC_TIMEOUT)
        region = grant.region
        assert grant.lease_id != 0
        assert list(grant.info.shape) == [768, 1024]
        assert region.nbytes == 3 * MIB
        assert region.offset % 256 == 0
        assert not region.writable, "a sealed tensor's region must be read-only"
        assert (region.device.device_type, region.device.device_id) == (1, 0)
        assert region.segment.startswith("tb-")
        assert not os.path.exists("/dev/shm/" + region.segment), "segments have no name"
        assert region.offset + region.nbytes <= region.segment_size
        assert stub.Stat(pb.StatRequest(name="py/array"), timeout=RPC_TIMEOUT).leases == 1

        descriptor, fd = local.fetch(grant.lease_id)
        try:
            assert descriptor.segment == region.segment
            assert descriptor.size == region.segment_size == os.fstat(fd).st_size
            assert not descriptor.writable
            assert os.readlink(f"/proc/self/fd/{fd}") == f"/memfd:{region.segment} (deleted)"
            with pytest.raises(PermissionError):  # the kernel's read-only, not a convention
                mmap.mmap(fd, region.segment_size, mmap.MAP_SHARED,
                          mmap.PROT_READ | mmap.PROT_WRITE)
            with mmap.mmap(fd, region.segment_size, mmap.MAP_SHARED, mmap.PROT_READ) as mm:
                view = np.frombuffer(mm, dtype=np.float32, count=region.nbytes // 4,
                                     offset=region.offset).reshape(768, 1024)
                np.testing.assert_array_equal(view, ARRAY)
                assert view.tobytes() == ARRAY.tobytes()
                del view  # the buffer export must end before the mmap closes
        finally:
            os.close(fd)

        stub.Release(pb.ReleaseRequest(session_id=session.id, lease_id=grant.lease_id),
                     timeout=RPC_TIMEOUT)
        assert stub.Stat(pb.StatRequest(name="py/array"), timeout=RPC_TIMEOUT).leases == 0
        code, details = rpc_code(stub.Release, pb.ReleaseRequest(session_id=session.id,
                                                                  lease_id=grant.lease_id))
        assert code == grpc.StatusCode.NOT_FOUND, details
        assert "lease" in details
        # Without the lease, no descriptor.
        reply, fds = local.call(lpb.LocalRequest(
            fetch_segment=lpb.LocalRequest.FetchSegment(lease_id=grant.lease_id)))
        assert (reply.code, fds) == (grpc.StatusCode.NOT_FOUND.value[0], [])
        assert "lease" in reply.message
    finally:
        local.close()
        session.close()


def test_the_docs_raw_grpc_client_runs_as_written(daemon, stub, array):
    with open(GRPC_DOC) as f:
        doc = f.read()
    with open(os.path.join(os.path.dirname(__file__), "raw_grpc_example.py")) as f:
        example = f.read()
    assert example in doc, "docs/grpc.md's raw gRPC example differs from raw_grpc_example.py"
    client = RawClient(daemon.socket)
    try:
        array, lease_id = client.get("py/array")
        np.testing.assert_array_equal(array, ARRAY)
        assert not array.flags.writeable
        assert stub.Stat(pb.StatRequest(name="py/array"), timeout=RPC_TIMEOUT).leases == 1
        del array
        client.release(lease_id)
        assert stub.Stat(pb.StatRequest(name="py/array"), timeout=RPC_TIMEOUT).leases == 0
    finally:
        client.close()


def test_another_uids_session_is_refused_on_the_local_channel(daemon, stub):
    if os.getuid() != 0:
        pytest.skip("switching to uid 65534 needs root")
    session = Session(stub, "pytest-victim")
    try:
        os.chmod(daemon.dir, 0o755)
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # uid 65534, keeping the socket's group so that it may connect
            os.close(read_end)
            code = 99
            try:
                os.setresgid(0, 0, 0)
                os.setgroups([])
                os.setresuid(65534, 65534, 65534)
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                sock.connect(daemon.socket + ".fd")
                request = lpb.LocalRequest(request_id=1, attach=lpb.LocalRequest.Attach(
                    session_id=session.id))
                sock.sendmsg([request.SerializeToString()])
                data, fds, _, _ = socket.recv_fds(sock, 1 << 16, 1)
                reply = lpb.LocalReply.FromString(data)
                os.write(write_end, f"{reply.code} {len(fds)} {reply.message}".encode())
                code = 0
            finally:
                os._exit(code)
        os.close(write_end)
        _, status = os.waitpid(pid, 0)
        said = os.read(read_end, 4096).decode()
        os.close(read_end)
        assert status == 0, said
        code, nfds, message = said.split(" ", 2)
        assert int(code) == grpc.StatusCode.PERMISSION_DENIED.value[0], said
        assert nfds == "0"
        assert "session_id" in message and "another user" in message
    finally:
        os.chmod(daemon.dir, 0o700)
        session.close()
    assert stub.Ping(pb.Empty(), timeout=RPC_TIMEOUT) == pb.Empty()


def test_python_producer_writes_through_a_writable_mapping(daemon, stub):
    session = Session(stub, "pytest-producer")
    local = LocalChannel(daemon, session.id)
    try:
        grant = stub.Create(pb.CreateRequest(session_id=session.id, name="py/produced",
                                             dtype=pb.DataType(code=1, bits=16, lanes=1),
                                             shape=[10, 20]), timeout=RPC_TIMEOUT)
        region = grant.region
        assert region.writable
        assert region.nbytes == 400
        assert region.offset % 256 == 0
        expected = (np.arange(200, dtype=np.uint16) * 7).reshape(10, 20)
        descriptor, fd = local.fetch(grant.lease_id)
        try:
            assert descriptor.writable, "the creator of a pending tensor may write it"
            with mmap.mmap(fd, region.segment_size, mmap.MAP_SHARED,
                           mmap.PROT_READ | mmap.PROT_WRITE) as mm:
                mm[region.offset:region.offset + region.nbytes] = expected.tobytes()
            with pytest.raises(OSError) as error:  # sealed size: nobody can truncate it
                os.ftruncate(fd, 0)
            assert error.value.errno == errno.EPERM
        finally:
            os.close(fd)
        # Pending: Stat reports it unsealed, Get does not see it yet.
        assert not stub.Stat(pb.StatRequest(name="py/produced"), timeout=RPC_TIMEOUT).sealed
        code, _ = rpc_code(stub.Get, pb.GetRequest(session_id=session.id, name="py/produced"))
        assert code == grpc.StatusCode.NOT_FOUND, "visible to Get before Seal"
        info = stub.Seal(pb.SealRequest(session_id=session.id, name="py/produced"),
                         timeout=RPC_TIMEOUT)
        assert info.sealed and info.leases == 1
        _, data = read(stub, "py/produced")
        assert data == expected.tobytes()
        stub.Release(pb.ReleaseRequest(session_id=session.id, lease_id=grant.lease_id),
                     timeout=RPC_TIMEOUT)
    finally:
        local.close()
        session.close()


def test_error_codes(stub, array):
    code, details = rpc_code(stub.Stat, pb.StatRequest(name="py/missing"))
    assert code == grpc.StatusCode.NOT_FOUND, details
    with pytest.raises(grpc.RpcError) as error:
        read(stub, "py/missing")
    assert error.value.code() == grpc.StatusCode.NOT_FOUND, error.value.details()
    for bad in ["", "/abs", "a//b", "a/../b", "has space", "n" * 256]:
        code, details = rpc_code(stub.Stat, pb.StatRequest(name=bad))
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (bad, details)
        assert "name" in details
        code, details = rpc_code(stub.Put, put_messages(bad, np.zeros(2, np.float32)))
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (bad, details)
        assert "name" in details
    code, details = rpc_code(stub.Put, put_messages("py/array", ARRAY))
    assert code == grpc.StatusCode.ALREADY_EXISTS, details
    code, details = rpc_code(stub.Get, pb.GetRequest(session_id="nope", name="py/array"))
    assert code == grpc.StatusCode.FAILED_PRECONDITION, details
    assert "session" in details
    code, details = rpc_code(stub.Put, iter([pb.PutRequest(data=b"1234")]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT, details
    assert "header" in details
    header = next(put_messages("py/short", np.zeros(4, np.float32)))
    code, details = rpc_code(stub.Put, iter([header, pb.PutRequest(data=b"123")]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT, details
    assert "data" in details
    code, details = rpc_code(stub.Put, iter([pb.PutRequest(header=pb.PutRequest.Header(
        name="py/bad", dtype=pb.DataType(code=99, bits=8, lanes=1), shape=[1]))]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT, details
    assert "dtype" in details
    assert stub.Ping(pb.Empty(), timeout=RPC_TIMEOUT) == pb.Empty()


def test_replace_publishes_a_new_version(stub, listed):
    before = stub.Stat(pb.StatRequest(name="py/list/a"), timeout=RPC_TIMEOUT)
    new = np.full(3, 9.5, np.float32)
    info = put(stub, "py/list/a", new, replace=True)
    assert info.version > before.version
    _, data = read(stub, "py/list/a")
    assert data == new.tobytes()


def test_session_end_releases_its_leases(stub, listed):
    stats = stub.Stats(pb.StatsRequest(), timeout=RPC_TIMEOUT)
    session = Session(stub, "pytest-leaver")
    for _ in range(3):
        stub.Get(pb.GetRequest(session_id=session.id, name="py/list/b"), timeout=RPC_TIMEOUT)
    assert stub.Stat(pb.StatRequest(name="py/list/b"), timeout=RPC_TIMEOUT).leases == 3
    assert stub.Stats(pb.StatsRequest(), timeout=RPC_TIMEOUT).clients == stats.clients + 1
    session.close()
    deadline = time.monotonic() + 1.0  # the stated reclaim bound
    while True:
        leases = stub.Stat(pb.StatRequest(name="py/list/b"), timeout=RPC_TIMEOUT).leases
        clients = stub.Stats(pb.StatsRequest(), timeout=RPC_TIMEOUT).clients
        if (leases, clients) == (0, stats.clients) or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert (leases, clients) == (0, stats.clients)
    code, _ = rpc_code(stub.Get, pb.GetRequest(session_id=session.id, name="py/list/b"))
    assert code == grpc.StatusCode.FAILED_PRECONDITION


def raw_local(daemon):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.settimeout(RPC_TIMEOUT)
    sock.connect(daemon.socket + ".fd")
    return sock


def exchange(sock, data, fds=()):
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.sendmsg([data])
    reply_bytes, got_fds, _, _ = socket.recv_fds(sock, 1 << 18, 16)
    return lpb.LocalReply.FromString(reply_bytes), got_fds


def test_a_session_opened_on_the_local_channel_waits_and_ends_with_it(daemon, stub):
    put(stub, "py/local/a", np.arange(10, dtype=np.float32))
    sock = raw_local(daemon)
    opened, _ = exchange(sock, lpb.LocalRequest(request_id=1, open=lpb.LocalRequest.Open(
        hello=pb.SessionRequest.Hello(pid=os.getpid()))).SerializeToString())
    assert opened.code == 0 and opened.opened.session_id
    # A published name: the grant and, beside it, the segment's read-only descriptor.
    reply, fds = exchange(sock, lpb.LocalRequest(request_id=2, get=pb.GetRequest(
        name="py/local/a")).SerializeToString())
    assert (reply.request_id, reply.code) == (2, 0), reply.message
    assert len(fds) == len(reply.descriptors) == 1 and not reply.descriptors[0].writable
    first_lease = reply.grant.lease_id
    with mmap.mmap(fds[0], reply.grant.region.segment_size, mmap.MAP_SHARED,
                   mmap.PROT_READ) as mm:
        view = np.frombuffer(mm, np.float32, count=10, offset=reply.grant.region.offset)
        assert view.tolist() == list(range(10))
        del view
    os.close(fds[0])
    # A second Get of the same segment: no descriptor again.
    reply, fds = exchange(sock, lpb.LocalRequest(request_id=3, get=pb.GetRequest(
        name="py/local/a")).SerializeToString())
    assert reply.code == 0 and fds == [] and len(reply.descriptors) == 0
    assert stub.Stat(pb.StatRequest(name="py/local/a"), timeout=RPC_TIMEOUT).leases == 2
    # A wait that runs out, without holding anything else up.
    start = time.monotonic()
    reply, _ = exchange(sock, lpb.LocalRequest(request_id=4, get=pb.GetRequest(
        name="py/local/never", wait_ms=200)).SerializeToString())
    assert (reply.request_id, reply.code) == (4, grpc.StatusCode.DEADLINE_EXCEEDED.value[0])
    assert time.monotonic() - start >= 0.2
    assert "wait_ms" in reply.message
    # Batched releases need no reply; a barrier says they are done.
    releases = lpb.LocalRequest(request_id=5, release_lease_ids=[first_lease])
    reply, _ = exchange(sock, releases.SerializeToString())
    assert (reply.request_id, reply.code) == (5, 0)
    assert stub.Stat(pb.StatRequest(name="py/local/a"), timeout=RPC_TIMEOUT).leases == 1
    sock.close()  # the session ends with its connection: its leases go
    deadline = time.monotonic() + 1.0
    while stub.Stat(pb.StatRequest(name="py/local/a"), timeout=RPC_TIMEOUT).leases != 0:
        assert time.monotonic() < deadline, "the local session's leases outlived it"
        time.sleep(0.01)


def test_malformed_local_requests_are_refused_naming_the_problem(daemon, stub, array):
    sock = raw_local(daemon)
    invalid = grpc.StatusCode.INVALID_ARGUMENT.value[0]
    reply, fds = exchange(sock, b"\xff\xff\xff garbage")
    assert (reply.code, fds) == (invalid, []) and "LocalRequest" in reply.message
    r, w = os.pipe()
    reply, fds = exchange(sock, lpb.LocalRequest(request_id=1).SerializeToString(), [r])
    os.close(r)
    os.close(w)
    assert reply.code == invalid and "descriptors" in reply.message
    reply, _ = exchange(sock, b"\x08\x01" + b"\x00" * (70 << 10))
    assert reply.code == invalid and "longer than" in reply.message
    reply, _ = exchange(sock, lpb.LocalRequest(request_id=2, get=pb.GetRequest(
        name="py/array")).SerializeToString())
    assert reply.code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
    assert "session" in reply.message
    reply, _ = exchange(sock, lpb.LocalRequest(request_id=21, watch=pb.WatchRequest(
        prefix="py/")).SerializeToString())
    assert reply.code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
    assert "session" in reply.message
    reply, _ = exchange(sock, lpb.LocalRequest(request_id=3, attach=lpb.LocalRequest.Attach(
        session_id="nope")).SerializeToString())
    assert reply.code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
    assert "session_id" in reply.message
    exchange(sock, lpb.LocalRequest(request_id=4, open=lpb.LocalRequest.Open()).SerializeToString())
    reply, fds = exchange(sock, lpb.LocalRequest(request_id=5, create=pb.CreateRequest(
        name="../bad", dtype=FLOAT32, shape=[1])).SerializeToString())
    assert (reply.code, fds) == (invalid, []) and "name" in reply.message
    reply, _ = exchange(sock, lpb.LocalRequest(request_id=6, fetch_segment=(
        lpb.LocalRequest.FetchSegment(lease_id=12345))).SerializeToString())
    assert reply.code == grpc.StatusCode.NOT_FOUND.value[0] and "lease" in reply.message
    # Watches: a bad prefix, and a second watch under an id already watching, are refused
    # naming the field; the first watch serves on, and a Cancel ends it with CANCELLED.
    reply, _ = exchange(sock, lpb.LocalRequest(request_id=7, watch=pb.WatchRequest(
        prefix="bad prefix")).SerializeToString())
    assert (reply.request_id, reply.code) == (7, invalid) and "watch.prefix" in reply.message
    reply, _ = exchange(sock, lpb.LocalRequest(request_id=8, watch=pb.WatchRequest(
        prefix="py/malformed/")).SerializeToString())
    assert (reply.request_id, reply.code, reply.WhichOneof("result")) == (8, 0, "empty")
    assert stub.Stats(pb.StatsRequest(), timeout=RPC_TIMEOUT).watchers == 1
    reply, _ = exchange(sock, lpb.LocalRequest(request_id=8, watch=pb.WatchRequest(
        prefix="py/")).SerializeToString())
    assert (reply.request_id, reply.code) == (8, invalid) and "request_id" in reply.message
    info = put(stub, "py/malformed/x", np.zeros(2, np.float32))
    reply_bytes, _, _, _ = socket.recv_fds(sock, 1 << 18, 16)
    event = lpb.LocalReply.FromString(reply_bytes)
    assert (event.request_id, event.watch_event.kind) == (8, pb.WatchEvent.PUBLISHED)
    assert event.watch_event.version == info.version
    reply, _ = exchange(sock, lpb.LocalRequest(request_id=0, cancel=lpb.LocalRequest.Cancel(
        request_id=8)).SerializeToString())
    assert (reply.request_id, reply.code) == (8, grpc.StatusCode.CANCELLED.value[0])
    assert stub.Stats(pb.StatsRequest(), timeout=RPC_TIMEOUT).watchers == 0
    sock.close()
    assert stub.Ping(pb.Empty(), timeout=RPC_TIMEOUT) == pb.Empty()


def start_watch(daemon, stub, request):
    """A Watch stream once it is registered (events from then on reach it): the daemon sends the
    initial metadata then, and counts the watcher already."""
    before = stub.Stats(pb.StatsRequest(), timeout=RPC_TIMEOUT).watchers
    call = stub.Watch(request, timeout=60)
    assert call.initial_metadata() is not None
    assert stub.Stats(pb.StatsRequest(), timeout=RPC_TIMEOUT).watchers == before + 1
    return call


def wait_watchers(stub, count):
    deadline = time.monotonic() + 10
    while stub.Stats(pb.StatsRequest(), timeout=RPC_TIMEOUT).watchers != count:
        assert time.monotonic() < deadline, "watchers never went back to %d" % count
        time.sleep(0.01)


def put_kept(stub, name, value, keep=1, replace=True):
    messages = list(put_messages(name, np.full(2, value, np.float32), replace=replace))
    messages[0].header.keep = keep
    return stub.Put(iter(messages), timeout=RPC_TIMEOUT)


def test_watch_streams_every_event_under_its_prefix_in_order(daemon, stub):
    W = pb.WatchEvent
    call = start_watch(daemon, stub, pb.WatchRequest(prefix="py/watch/"))
    a1 = put_kept(stub, "py/watch/a", 1, replace=False)
    put_kept(stub, "py/other/x", 1)  # another prefix: not seen
    a2 = put_kept(stub, "py/watch/a", 2)
    h = [put_kept(stub, "py/watch/h", i, keep=2) for i in range(3)]
    stub.Delete(pb.DeleteRequest(name="py/watch/a"), timeout=RPC_TIMEOUT)
    events = [next(call) for _ in range(7)]
    call.cancel()
    assert [(e.kind, e.name, e.version) for e in events] == [
        (W.PUBLISHED, "py/watch/a", a1.version),
        (W.REPLACED, "py/watch/a", a2.version),
        (W.PUBLISHED, "py/watch/h", h[0].version),
        (W.REPLACED, "py/watch/h", h[1].version),
        (W.REPLACED, "py/watch/h", h[2].version),
        (W.EXPIRED, "py/watch/h", h[0].version),  # out of a history of 2
        (W.DELETED, "py/watch/a", a2.version),
    ]
    sequences = [e.sequence for e in events]
    assert sequences == sorted(set(sequences))
    assert events[1].previous_version == a1.version
    assert events[0].sequence == a1.version and events[0].info.name == "py/watch/a"
    assert list(events[0].info.shape) == [2] and events[0].info.leases == 0
    # Resuming after the first event gives the rest again, from the daemon's log.
    again = stub.Watch(pb.WatchRequest(prefix="py/watch/", after_version=events[0].sequence),
                       timeout=60)
    assert [next(again).sequence for _ in range(6)] == sequences[1:]
    again.cancel()
    wait_watchers(stub, 0)
    stub.Delete(pb.DeleteRequest(name="py/watch/h"), timeout=RPC_TIMEOUT)


def test_watch_refuses_a_bad_prefix_and_reports_a_gap_as_one_lost_event(daemon, stub):
    def first_event(**kwargs):
        return next(stub.Watch(pb.WatchRequest(prefix="bad prefix"), **kwargs))

    code, details = rpc_code(first_event)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "prefix" in details
    # From before what this daemon remembers (it started after sequence 1): one LOST first.
    call = stub.Watch(pb.WatchRequest(prefix="py/lost/", after_version=1), timeout=60)
    lost = next(call)
    assert lost.kind == pb.WatchEvent.LOST and lost.lost_first == 2
    assert lost.lost_last >= lost.lost_first and lost.sequence == lost.lost_last
    info = put_kept(stub, "py/lost/x", 1)
    event = next(call)
    assert (event.kind, event.version) == (pb.WatchEvent.PUBLISHED, info.version)
    call.cancel()
    wait_watchers(stub, 0)


def test_sigterm_exits_zero_and_leaves_nothing(daemon, stub, array):
    session = Session(stub, "pytest-last")
    local = LocalChannel(daemon, session.id)
    grant = stub.Get(pb.GetRequest(session_id=session.id, name="py/array"), timeout=RPC_TIMEOUT)
    _, fd = local.fetch(grant.lease_id)
    local.close()
    session.close()
    # What the daemon maps or holds open of shared memory: memfds only, nothing named in
    # /dev/shm. (This daemon's own, not a listing of /dev/shm, which others write to.)
    used = segments_of(daemon.pid)
    assert grant.region.segment in used["memfd"] and used["named"] == set(), used
    status = daemon.stop(signal.SIGTERM)
    assert status == 0, f"tensorbrokerd exited with {status}"
    left = {s for s in used["memfd"] if os.path.exists("/dev/shm/" + s)}
    assert left == set(), "nothing of the daemon is ever named in /dev/shm"
    assert not os.path.exists(daemon.socket)
    assert not os.path.exists(daemon.socket + ".fd")
    # A descriptor outlives the daemon: its pages are the client's until it closes it.
    with mmap.mmap(fd, grant.region.segment_size, mmap.MAP_SHARED, mmap.PROT_READ) as mm:
        view = np.frombuffer(mm, dtype=np.float32, count=grant.region.nbytes // 4,
                             offset=grant.region.offset)
        assert view.tobytes() == ARRAY.tobytes()
        del view
    os.close(fd)

