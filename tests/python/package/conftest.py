"""Fixtures for the tensorbroker package tests: a real tensorbrokerd on a private socket (one
per test; one per module for modules whose long-lived peers need it), and peer processes
(peer.py) that act as consumers, so producer and consumer are always different processes.
A failed test lets go of what it held before its fixtures are torn down (see
pytest_runtest_teardown): one failure never makes the next test fail."""

import ctypes
import gc
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# tests/python/daemon_wait.py
from daemon_wait import describe_exit, wait_until_serving  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
HANG_GUARD = 120  # seconds; only against hangs, never a measurement
PR_SET_PDEATHSIG = 1


def dies_with_test(sig):
    """preexec_fn: the child gets `sig` when this test process dies, however it dies, so a
    crashed or killed test leaves no daemon (and no shared memory) behind."""
    def arm():
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    return arm


class Daemon:
    """`takeover`: a Daemon whose socket this one takes over (tensorbrokerd --takeover); its
    directory then belongs to this one. The daemon's stderr goes to `stderr` (a file opened for
    writing) or else to a file of its own in its directory: log_path either way. A start that
    fails quotes it (daemon_wait.py); stop() prints it."""

    def __init__(self, *extra_args, stderr=None, takeover=None):
        binary = os.environ.get("TENSORBROKERD")
        assert binary and os.path.exists(binary), "set TENSORBROKERD to the tensorbrokerd binary"
        if takeover is None:
            self.dir = tempfile.mkdtemp(prefix="tbpkg.")
        else:
            self.dir = takeover.dir
            extra_args = ("--takeover", *extra_args)
        self.socket = os.path.join(self.dir, "broker.sock")
        env = dict(os.environ)
        env.pop("LD_PRELOAD", None)  # set for sanitized Python processes only
        if "TENSORBROKERD_ASAN_OPTIONS" in env:
            env["ASAN_OPTIONS"] = env["TENSORBROKERD_ASAN_OPTIONS"]

        if stderr is None:
            # Its own name: a takeover's daemon shares the directory with the one it replaces.
            fd, self.log_path = tempfile.mkstemp(prefix="tensorbrokerd.", suffix=".log",
                                                 dir=self.dir)
            with os.fdopen(fd, "wb") as log:
                self.proc = self._start(binary, extra_args, env, log)
        else:
            self.log_path = stderr.name
            self.proc = self._start(binary, extra_args, env, stderr)
        try:
            wait_until_serving(self.socket, self.proc, self.log_path)
        except AssertionError:
            if takeover is None:
                shutil.rmtree(self.dir, ignore_errors=True)
            raise

    def _start(self, binary, extra_args, env, log):
        return subprocess.Popen(
            [binary, "--socket", self.socket, "--log-level", "warning", *extra_args], env=env,
            stderr=log, preexec_fn=dies_with_test(signal.SIGTERM))

    def log(self):
        """What it wrote to its stderr so far ("" once stop() removed its directory)."""
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def stop(self):
        """SIGTERM; its exit status. Prints its log, if it wrote one, for whoever reads the
        test's output (where its stderr went before it was kept in a file)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=60)
        text = self.log()
        if text:
            sys.stderr.write(f"tensorbrokerd (pid {self.proc.pid}, {describe_exit(code)}) "
                             f"logged:\n{text}")
        shutil.rmtree(self.dir, ignore_errors=True)
        return code


# The start of a script run as uid 65534 with group 0 (which may open the socket): a fresh
# interpreter (`python -c AS_UID_65534 + script`), not a bare fork, since gRPC's threads do not
# survive fork(). It drops root before importing tensorbroker; outcome(call) gives
# ["ok", result] or [error class name, message], for a JSON report on stdout.
AS_UID_65534 = r"""
import ctypes, errno, json, os, sys
os.setgroups([0])
os.setresuid(65534, 65534, 65534)
import numpy as np, tensorbroker

def outcome(call):
    try:
        result = call()
    except tensorbroker.Error as e:
        return [type(e).__name__, str(e)]
    return ["ok", result]
"""


def _served():
    d = Daemon()
    try:
        yield d
    finally:
        assert d.stop() == 0, "tensorbrokerd did not exit cleanly"


@pytest.fixture
def daemon():
    """A daemon of this test alone: whatever an earlier test left in a daemon (published names,
    leases of processes still exiting, waits, watches), failed or not, this test never sees, so
    daemon-wide figures (stats()) are this test's own."""
    yield from _served()


@pytest.fixture(scope="module")
def shared_daemon():
    """One daemon for a module whose long-lived peers (kept_peers: torch loads once) serve many
    tests. Tests that use it assert per-name figures (stat(name)) and deltas only."""
    yield from _served()


def _connected(d):
    import tensorbroker

    c = tensorbroker.connect(d.socket)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def client(daemon):
    yield from _connected(daemon)


@pytest.fixture
def shared_client(shared_daemon):
    yield from _connected(shared_daemon)


def _let_go_of_locals(tb):
    """Clears the locals of the frames of traceback `tb` that have finished."""
    while tb is not None:
        frame = tb.tb_frame
        try:
            frame.clear()
        except RuntimeError:  # still running (pytest's own frames): left alone
            pass
        else:
            # The dict of locals pytest had the frame make for the failure's report stays
            # filled until it is asked for again (Python 3.11), which empties it.
            frame.f_locals
        tb = tb.tb_next


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_teardown(item, nextitem):
    """Before a failed test's fixtures are torn down, lets go of what its frames still hold.
    pytest keeps the failure's traceback (sys.last_traceback, for post-mortem debugging), and
    with it every local of the failed test: tensors, views and capsules would keep their leases
    and mappings until the next failure replaced it, and the next test would find them."""
    tb = getattr(sys, "last_traceback", None)
    if tb is not None:
        _let_go_of_locals(tb)
        error, seen = getattr(sys, "last_value", None), set()
        while error is not None and id(error) not in seen:  # and of the exceptions it chains
            seen.add(id(error))
            _let_go_of_locals(error.__traceback__)
            error = error.__cause__ or error.__context__
        for name in ("last_type", "last_value", "last_traceback"):
            if hasattr(sys, name):
                delattr(sys, name)
        gc.collect()  # what the locals held in reference cycles
    yield


class Peer:
    """A consumer in another process: one JSON command per line in, one JSON answer out."""

    def __init__(self, socket, *, torch=True, sanitizer_options=""):
        args = [sys.executable, os.path.join(HERE, "peer.py"), socket]
        if not torch:
            args.append("--no-torch")
        env = dict(os.environ)
        if sanitizer_options:  # only matters in sanitizer builds
            for var in ("ASAN_OPTIONS", "TSAN_OPTIONS"):
                env[var] = ":".join(filter(None, [env.get(var, ""), sanitizer_options]))
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, bufsize=1, env=env,
                                     preexec_fn=dies_with_test(signal.SIGKILL))
        ready = self._read()
        assert ready == {"ready": True}, ready

    def _read(self):
        line = self.proc.stdout.readline()
        assert line, f"peer {self.proc.pid} died (exit {self.proc.wait(timeout=HANG_GUARD)})"
        return json.loads(line)

    def ask(self, op, **args):
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        answer = self._read()
        if "error" in answer:
            raise AssertionError(f"peer {op} failed: {answer['error']}")
        return answer

    def send(self, op, **args):
        """Sends a command without waiting for an answer (the peer may die doing it)."""
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()

    def wait(self):
        return self.proc.wait(timeout=HANG_GUARD)

    def release_all(self):
        """Lets go of everything it holds (the daemon has the releases when this returns);
        nothing to do for a peer that has exited."""
        if self.proc.poll() is None:
            self.ask("release_all")

    def close(self):
        if self.proc.poll() is None:
            try:
                self.send("exit")
                self.proc.wait(timeout=HANG_GUARD)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def peers(daemon):
    started = []

    def start(**kwargs):
        p = Peer(daemon.socket, **kwargs)
        started.append(p)
        return p

    yield start
    for p in started:
        p.close()


@pytest.fixture(scope="module")
def kept_peers(shared_daemon):
    """Peers on shared_daemon that live as long as the module (a peer with torch takes seconds
    to start): kept_peers(key, **Peer kwargs) is the module's peer `key`, started anew when an
    earlier test's failure ended it. A test's fixture calls release_all() on it at teardown,
    so what a test left it holding, failed or not, the next test does not find."""
    kept = {}

    def get(key, **kwargs):
        p = kept.get(key)
        if p is None or p.proc.poll() is not None:
            p = kept[key] = Peer(shared_daemon.socket, **kwargs)
        return p

    yield get
    for p in kept.values():
        p.close()


def wait_for(predicate, what):
    """Polls `predicate` until it is true; fails after HANG_GUARD seconds."""
    deadline = time.monotonic() + HANG_GUARD
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
