"""tensorbrokerd's log lines, end to end with the real daemon and CLI: one line per event with
the syslog priority prefix, the tensor name, the client's pid and uid as the kernel reports them
(SO_PEERCRED, not what the client claims) and the status code of failures; names from clients
escaped so that no client can forge a log line; levels that keep successful calls (a producer
may publish thousands a second) out of info."""

import os
import re
import signal
import subprocess
import sys
import tempfile

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from daemon_wait import wait_for  # noqa: E402  (tests/python/daemon_wait.py)

DAEMON = os.environ.get("TENSORBROKERD", "")
CLI = os.environ.get("TENSORBROKER_CLI", "")
pytestmark = pytest.mark.skipif(not (DAEMON and CLI), reason="set TENSORBROKERD and TENSORBROKER_CLI")
HANG_GUARD = 60


class Broker:
    def __init__(self, workdir, level):
        self.workdir = workdir
        self.socket = os.path.join(workdir, "b.sock")
        self.log_path = os.path.join(workdir, "daemon.log")
        with open(self.log_path, "wb") as log:
            self.daemon = subprocess.Popen([DAEMON, "--socket", self.socket, "--capacity", "64M",
                                            "--cuda-capacity", "0", "--log-level", level],
                                           stderr=log)
        wait_for(self.daemon, f"serving on {self.socket}", lambda: os.path.exists(self.socket),
                 self.log_path)

    def cli(self, *args, prefix=()):
        """Runs the CLI; returns (its pid, exit status)."""
        proc = subprocess.Popen([*prefix, CLI, "--socket", self.socket, *args],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return proc.pid, proc.wait(timeout=HANG_GUARD)

    def lines(self):
        with open(self.log_path, encoding="utf-8", errors="strict") as f:
            return f.read().splitlines()

    def stop(self):
        self.daemon.send_signal(signal.SIGTERM)
        assert self.daemon.wait(timeout=HANG_GUARD) == 0


def started(level):
    with tempfile.TemporaryDirectory(prefix="tblogs.") as d:
        broker = Broker(d, level)
        yield broker
        broker.stop()


@pytest.fixture
def debug_broker():
    yield from started("debug")


@pytest.fixture
def info_broker():
    yield from started("info")


def npy(workdir):
    path = os.path.join(workdir, "x.npy")
    np.save(path, np.zeros((10, 100), np.float32))
    return path


def test_events_name_the_tensor_the_clients_pid_and_uid_and_the_code(debug_broker):
    b = debug_broker
    uid = os.getuid()
    put_pid, status = b.cli("put", "logs/x", npy(b.workdir))
    assert status == 0
    get_pid, status = b.cli("get", "logs/x", os.path.join(b.workdir, "out.npy"))
    assert status == 0
    stat_pid, status = b.cli("stat", "logs/missing")
    assert status == 1
    rm_pid, status = b.cli("rm", "logs/x")
    assert status == 0
    lines = b.lines()
    who = lambda pid: f"pid={pid} uid={uid}"  # noqa: E731
    expected = [
        f"<6>client connected: {who(put_pid)}",
        f'<7>Create name="logs/x" {who(put_pid)}: float32[10,100] 4000 bytes on cpu',
        f'<7>Seal name="logs/x" {who(put_pid)}: published float32[10,100] 4000 bytes on cpu',
        f'<7>Get name="logs/x" {who(get_pid)}: lease ',
        f'<7>Stat name="logs/missing" {who(stat_pid)}: NOT_FOUND: ',
        f'<7>Delete name="logs/x" {who(rm_pid)}: unpublished',
        f"<6>client disconnected: {who(rm_pid)} leases_released=0 pending_aborted=0",
    ]
    for want in expected:
        assert any(line.startswith(want) for line in lines), (want, lines)
    # Every line is one event with a syslog priority prefix.
    assert all(re.match(r"<[3-7]>\S", line) for line in lines), lines


def test_the_uid_is_the_kernels_not_the_clients_word(debug_broker):
    if os.getuid() != 0:
        pytest.skip("running the CLI as another uid needs root")
    b = debug_broker
    os.chmod(b.workdir, 0o755)  # the socket's directory; the socket itself stays 0660
    # uid 65534 with the socket's group (root's, here) may connect; it cannot claim to be root.
    pid, status = b.cli("stat", "logs/who", prefix=("setpriv", "--reuid", "65534", "--regid",
                                                     "0", "--clear-groups"))
    assert status == 1
    assert any(line.startswith(f'<7>Stat name="logs/who" pid={pid} uid=65534: NOT_FOUND')
               for line in b.lines()), b.lines()


def raw_stat(socket, name):
    """Stat with any bytes as the name, past the client library's checks; the gRPC code."""
    import grpc
    request = b"\x0a" + bytes([len(name)]) + name  # StatRequest{name = 1}
    with grpc.insecure_channel(f"unix:{socket}") as channel:
        stat = channel.unary_unary("/tensorbroker.v1.Broker/Stat")
        with pytest.raises(grpc.RpcError) as error:
            stat(request, timeout=HANG_GUARD)
        return error.value.code()


def test_names_from_clients_cannot_forge_log_lines(debug_broker):
    import grpc
    b = debug_broker
    name = "x\n<3>tensorbrokerd: forged \"line\"\x01é".encode()
    assert raw_stat(b.socket, name) == grpc.StatusCode.INVALID_ARGUMENT
    lines = b.lines()  # read as strict UTF-8: every line is plain ASCII
    assert not any(line.startswith("<3>tensorbrokerd: forged") for line in lines), lines
    logged = [line for line in lines if line.startswith("<6>Stat name=")]
    assert len(logged) == 1, lines
    assert logged[0].startswith(
        '<6>Stat name="x\\n<3>tensorbrokerd: forged \\"line\\"\\x01\\xc3\\xa9" pid=')
    assert ": INVALID_ARGUMENT: " in logged[0]


def test_info_has_clients_and_failures_not_successful_calls(info_broker):
    import grpc
    b = info_broker
    put_pid, status = b.cli("put", "logs/y", npy(b.workdir))
    assert status == 0
    for _ in range(3):
        assert b.cli("get", "logs/y", os.path.join(b.workdir, "out.npy"))[1] == 0
    assert b.cli("stat", "logs/missing")[1] == 1  # NOT_FOUND: normal flow, debug
    assert raw_stat(b.socket, b"../bad") == grpc.StatusCode.INVALID_ARGUMENT
    lines = b.lines()
    assert f"<6>client connected: pid={put_pid} uid={os.getuid()}" in lines
    assert sum(line.startswith('<6>Stat name="../bad" ') for line in lines) == 1, lines
    assert not any(line.startswith(("<7>", "<6>Get ", "<6>Create ", "<6>Seal ", '<6>Stat name="logs'))
                   for line in lines), lines
