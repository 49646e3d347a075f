"""Another broker's view, from Python: the daemon's peer listener (--peer-listen) over mutual TLS
with grpcio's own TLS and certificates this test makes (tests/support/make_test_pki.sh).

A peer whose certificate the CA signed reads a tensor its readers admit (peer:broker-b) with
docs/grpc.md's snippet, byte for byte; another broker is not admitted (NOT_FOUND); a peer may
only read (PERMISSION_DENIED naming the method); a certificate of another CA, an expired one,
no client certificate and plaintext are all refused before any call (UNAVAILABLE), and the
bytes stay.
"""

import os
import re
import subprocess
import tempfile
import time

import grpc
import numpy as np
import pytest

from tensorbroker.v1 import broker_pb2 as pb
from tensorbroker.v1 import broker_pb2_grpc as pb_grpc

from raw_daemon import RawDaemon

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
PKI_SCRIPT = os.path.join(ROOT, "tests", "support", "make_test_pki.sh")
GRPC_DOC = os.path.join(ROOT, "docs", "grpc.md")
UINT8 = pb.DataType(code=1, bits=8, lanes=1)
RPC_TIMEOUT = 30  # seconds; a hang guard, never a measurement


@pytest.fixture(scope="module")
def pki():
    with tempfile.TemporaryDirectory(prefix="tbpki.") as directory:
        subprocess.run(["/bin/bash", PKI_SCRIPT, directory], check=True, capture_output=True)
        yield directory


@pytest.fixture
def daemon(pki):
    d = RawDaemon("--log-level", "info", "--peer-listen", "127.0.0.1:0",
                  "--tls-cert", os.path.join(pki, "broker-a.crt"),
                  "--tls-key", os.path.join(pki, "broker-a.key"),
                  "--tls-ca", os.path.join(pki, "ca.crt"))
    # The socket answers Ping as the peer listener starts: wait for its line (30 s at most).
    deadline = time.monotonic() + 30
    while not (match := re.search(r"peers: serving on 127\.0\.0\.1:(\d+)", d.log())):
        assert time.monotonic() < deadline, d.log()
        time.sleep(0.02)
    d.peer_port = int(match.group(1))
    yield d
    d.cleanup()


def put(stub, name, data, readers):
    def messages():
        yield pb.PutRequest(header=pb.PutRequest.Header(name=name, dtype=UINT8, shape=[len(data)],
                                                        readers=readers))
        yield pb.PutRequest(data=data)
    return stub.Put(messages(), timeout=RPC_TIMEOUT)


def peer_stub(pki, port, identity="broker-b", ca="ca.crt"):
    """A stub as a peer with NAME.crt/NAME.key (identity None: no client certificate)."""
    def read(name):
        with open(os.path.join(pki, name), "rb") as f:
            return f.read()
    creds = grpc.ssl_channel_credentials(
        root_certificates=read(ca),
        private_key=read(identity + ".key") if identity else None,
        certificate_chain=read(identity + ".crt") if identity else None)
    return pb_grpc.BrokerStub(grpc.secure_channel(f"127.0.0.1:{port}", creds))


def code_of(call, *args):
    with pytest.raises(grpc.RpcError) as error:
        result = call(*args, timeout=RPC_TIMEOUT)
        if hasattr(result, "__iter__"):  # a stream fails when read
            list(result)
    return error.value.code(), error.value.details()


def test_a_peer_reads_what_its_readers_admit_with_the_docs_snippet(daemon, pki):
    data = np.random.default_rng(33).integers(0, 256, 3 << 20, dtype=np.uint8).tobytes()
    put(daemon.stub, "weights/w0", data, ["peer:broker-b"])
    # docs/grpc.md's snippet, as written, with broker-b's files.
    text = open(GRPC_DOC).read()
    snippet = text[text.index("creds = grpc.ssl_channel_credentials("):]
    snippet = snippet[:snippet.index("```")]
    snippet = snippet.replace('"node-a:7070"', f'"127.0.0.1:{daemon.peer_port}"')
    here = os.getcwd()
    os.chdir(pki)
    try:
        os.symlink("broker-b.crt", "tls.crt")
        os.symlink("broker-b.key", "tls.key")
        scope = {"grpc": grpc, "pb": pb, "pb_grpc": pb_grpc}
        exec(snippet, scope)
    finally:
        for link in ("tls.crt", "tls.key"):
            os.unlink(link)
        os.chdir(here)
    assert scope["data"] == data

    other = peer_stub(pki, daemon.peer_port, "broker-a")
    assert code_of(other.Stat, pb.StatRequest(name="weights/w0")) == (
        grpc.StatusCode.NOT_FOUND, "name 'weights/w0' is not published")


def test_a_peer_may_only_read(daemon, pki):
    put(daemon.stub, "weights/w1", b"\x01" * 100, ["*"])
    peer = peer_stub(pki, daemon.peer_port)
    assert code_of(peer.Delete, pb.DeleteRequest(name="weights/w1")) == (
        grpc.StatusCode.PERMISSION_DENIED,
        "Delete: peer 'broker-b' may only read here (Stat, Read, List, Watch, Stats, Ping); "
        "Delete is for the broker's local clients")
    code, _ = code_of(peer.Put, iter([pb.PutRequest(header=pb.PutRequest.Header(name="x"))]))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert b"".join(r.data for r in daemon.stub.Read(pb.ReadRequest(name="weights/w1"),
                                                      timeout=RPC_TIMEOUT)) == b"\x01" * 100
    # A flood of refused calls is one warning per peer and method per 10 s, not one per call.
    for _ in range(200):
        assert code_of(peer.Delete, pb.DeleteRequest(name="weights/w1"))[0] == \
            grpc.StatusCode.PERMISSION_DENIED
    lines = [line for line in daemon.log().splitlines() if "peer broker-b called" in line]
    assert len(lines) == 2, lines  # Delete's first, Put's first
    assert "peer broker-b called Delete: peers may only read: refused 1 call(s), the last from " \
        in lines[0], lines


@pytest.mark.parametrize("identity", ["intruder", "expired", None, "plaintext"])
def test_no_valid_certificate_no_call(daemon, pki, identity):
    put(daemon.stub, "weights/w2", b"\x02" * 100, ["*"])
    if identity == "plaintext":
        stub = pb_grpc.BrokerStub(grpc.insecure_channel(f"127.0.0.1:{daemon.peer_port}"))
    else:
        stub = peer_stub(pki, daemon.peer_port, identity)
    code, _ = code_of(stub.Read, pb.ReadRequest(name="weights/w2"))
    assert code == grpc.StatusCode.UNAVAILABLE
    stats = daemon.stub.Stats(pb.StatsRequest(), timeout=RPC_TIMEOUT)
    assert [m.method for m in stats.methods if m.method == "Read"] == []  # no Read was made
    assert b"".join(r.data for r in peer_stub(pki, daemon.peer_port).Read(
        pb.ReadRequest(name="weights/w2"), timeout=RPC_TIMEOUT)) == b"\x02" * 100
