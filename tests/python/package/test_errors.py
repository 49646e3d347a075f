"""Each exception class is raised by the case that should raise it, and is also the builtin a
Python programmer would catch; the GIL is released while a call waits; Ctrl-C interrupts an
endless get(); tensors, views and capsules still alive at interpreter exit are harmless. And the
tests' own Daemon: one that cannot start fails the test at once, with the daemon's error."""

import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import numpy as np
import pytest

import tensorbroker
from conftest import Daemon, wait_for
from daemon_wait import DEADLINE


def test_not_found_is_a_key_error(client):
    for call in (lambda: client.get("missing/x", timeout=0), lambda: client.stat("missing/x"),
                 lambda: client.delete("missing/x")):
        with pytest.raises(tensorbroker.NotFound, match="'missing/x' is not published") as e:
            call()
        assert isinstance(e.value, KeyError) and isinstance(e.value, tensorbroker.Error)
        assert e.value.code == "NOT_FOUND"


def test_already_exists(client):
    first = client.put("err/taken", np.zeros(3))
    with pytest.raises(tensorbroker.AlreadyExists, match="'err/taken' is already published"):
        client.put("err/taken", np.ones(3))
    client.put("err/taken", np.ones(3), replace=True)  # a new version instead
    assert client.stat("err/taken")["version"] > first["version"]
    with client.get("err/taken", timeout=0) as t:
        assert np.asarray(t).tolist() == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("call,field", [
    (lambda c: c.put("bad//name", np.zeros(1)), "name"),
    (lambda c: c.put("", np.zeros(1)), "name"),
    (lambda c: c.create("err/dtype", (2,), "float128"), "dtype"),
    (lambda c: c.create("err/shape", (2, -1), "float32"), "shape"),
    (lambda c: c.create("err/shape2", "not a shape", "float32"), "shape"),
    (lambda c: c.get("err/x", timeout=-1), "timeout"),
])
def test_invalid_argument_is_a_value_error_naming_the_field(client, call, field):
    with pytest.raises(tensorbroker.InvalidArgument, match=field) as e:
        call(client)
    assert isinstance(e.value, ValueError) and e.value.code in ("INVALID_ARGUMENT", "OUT_OF_RANGE")


def test_capacity_error_is_a_memory_error():
    small = Daemon("--capacity", "64M")
    try:
        c = tensorbroker.connect(small.socket)
        with pytest.raises(tensorbroker.CapacityError, match="capacity") as e:
            c.put("big", np.zeros(100 << 20, np.uint8))
        assert isinstance(e.value, MemoryError)
        assert c.stats()["used_bytes"] == 0  # nothing half-made is left behind
        c.close()
    finally:
        assert small.stop() == 0


def test_timeout_is_a_timeout_error(client):
    start = time.monotonic()
    with pytest.raises(tensorbroker.Timeout, match="'err/later' was not published within 0.3 s") as e:
        client.get("err/later", timeout=0.3)
    assert isinstance(e.value, TimeoutError)
    assert time.monotonic() - start >= 0.3
    for tiny in (0.0004, 0.001, 0.0011):  # never a NotFound from a last 0 ms slice
        with pytest.raises(tensorbroker.Timeout):
            client.get("err/later", timeout=tiny)
    with pytest.raises(tensorbroker.NotFound):
        client.get("err/later", timeout=0)


def test_permission_denied_is_a_permission_error():
    d = Daemon()
    try:
        if os.geteuid() == 0:
            # root passes every permission check: become nobody for the connect (the socket is
            # 0660 root:root), then root again.
            os.seteuid(65534)
            try:
                with pytest.raises(tensorbroker.PermissionDenied, match="may not connect") as e:
                    tensorbroker.connect(d.socket, timeout=2)
            finally:
                os.seteuid(0)
        else:
            os.chmod(d.socket, 0)
            with pytest.raises(tensorbroker.PermissionDenied, match="may not connect") as e:
                tensorbroker.connect(d.socket, timeout=2)
        assert isinstance(e.value, PermissionError)
    finally:
        assert d.stop() == 0


SQUATTER = textwrap.dedent("""
    import socket, sys
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(sys.argv[1])
    listener.listen(8)
    print("ready", flush=True)
    sys.stdin.read()  # never answers; ends when the test closes stdin
""")


def test_a_socket_served_by_another_uid_is_a_failed_precondition():
    """Another user squats the path (uid 65534 listens there): connect refuses to trust it."""
    if os.geteuid() != 0:
        pytest.skip("acting as uid 65534 needs root")
    if os.environ.get("TENSORBROKER_DAEMON_USER"):
        pytest.skip("TENSORBROKER_DAEMON_USER is set; this test expects the default")
    squatted = tempfile.mkdtemp(prefix="tbsquat.")  # in /tmp, so that uid 65534 reaches it
    os.chown(squatted, 65534, 65534)  # the squatter's own directory
    path = os.path.join(squatted, "broker.sock")
    squatter = subprocess.Popen([sys.executable, "-c", SQUATTER, path], user=65534, group=65534,
                                extra_groups=[], cwd="/", stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
    try:
        assert squatter.stdout.readline() == "ready\n"
        with pytest.raises(tensorbroker.FailedPrecondition) as e:
            tensorbroker.connect(path, timeout=2)
        owner = f"uid 65534 ({pwd.getpwuid(65534).pw_name})"
        try:
            pwd.getpwnam("tensorbroker")
            trusted = "root or tensorbroker"
        except KeyError:
            trusted = "root"
        assert str(e.value) == (
            f"socket {path} is served by {owner}, not by {trusted}: refusing to trust it (if that "
            "is your broker, set TENSORBROKER_DAEMON_USER to the user it runs as)")
        assert e.value.code == "FAILED_PRECONDITION" and isinstance(e.value, RuntimeError)
    finally:
        squatter.stdin.close()
        assert squatter.wait(timeout=60) == 0
        shutil.rmtree(squatted)


def test_unavailable_is_a_connection_error(tmp_path):
    with pytest.raises(tensorbroker.Unavailable, match="no tensorbrokerd answers") as e:
        tensorbroker.connect(str(tmp_path / "nobody.sock"), timeout=0.2)
    assert isinstance(e.value, ConnectionError)
    # A daemon that goes away and does not come back: after waiting reconnect_timeout for it,
    # calls answer Unavailable, not a hang or a crash.
    d = Daemon()
    c = tensorbroker.connect(d.socket, reconnect_timeout=0.5)
    assert d.stop() == 0
    with pytest.raises(tensorbroker.Unavailable, match="did not come back within 500 ms"):
        c.stats()


def test_a_daemon_that_cannot_start_fails_at_once_with_its_error():
    started = time.monotonic()
    with pytest.raises(AssertionError) as failure:
        Daemon("--capacity", "nonsense")
    # At once, not at the deadline: before half of it (the daemon exits within milliseconds).
    assert time.monotonic() - started < DEADLINE / 2
    message = str(failure.value)
    assert message.startswith("tensorbrokerd exited (exit status 2) before it was serving on "), \
        message
    assert message.endswith("/broker.sock; its log:\n  | tensorbrokerd: --capacity 'nonsense' "
                            "is not a size (examples: 1048576, 512M, 4G, 1.5GiB)\n"), message


def test_a_client_rides_through_a_takeover():
    """A new daemon takes over the running one (tensorbrokerd --takeover): the same client goes
    on without doing anything, and the view it held keeps its bytes and is leased again."""
    old = Daemon()
    c = tensorbroker.connect(old.socket)
    values = np.arange(1000, dtype=np.float32)
    version = c.put("ride/a", values)["version"]
    held = c.get("ride/a", timeout=0)
    view = np.from_dlpack(held)
    new = Daemon(takeover=old)
    assert old.proc.wait(timeout=60) == 0
    try:
        with c.get("ride/a", timeout=0) as again:
            np.testing.assert_array_equal(np.from_dlpack(again), values)
        np.testing.assert_array_equal(view, values)
        assert c.stat("ride/a")["version"] == version
        assert c.stat("ride/a")["leases"] == 1  # the held view's, taken again
        del view
        held.release()
        assert c.stat("ride/a")["leases"] == 0
        c.close()
    finally:
        assert new.stop() == 0


def test_failed_precondition_for_the_wrong_state(client):
    w = client.create("err/state", (2,), "int32")
    with pytest.raises(tensorbroker.FailedPrecondition, match="not sealed"):
        client.delete("err/state")
    w.seal()
    with pytest.raises(tensorbroker.FailedPrecondition, match="nothing to seal") as e:
        w.seal()
    assert isinstance(e.value, RuntimeError)
    w.release()
    with pytest.raises(tensorbroker.FailedPrecondition, match="released"):
        np.asarray(w)
    client.close()
    with pytest.raises(tensorbroker.FailedPrecondition, match="closed"):
        client.stats()


def test_put_of_something_that_is_no_tensor_is_a_type_error(client):
    with pytest.raises(TypeError, match="__dlpack__"):
        client.put("err/obj", {"not": "a tensor"})


def test_gil_is_released_while_get_waits(client):
    # The waiter blocks in get() for a name only the main thread will publish: were the GIL
    # held during the wait, the main thread could not see it waiting, run Python or put(), and
    # the waiter would time out.
    result = {}

    def waiter():
        with client.get("gil/late", timeout=60) as t:
            result["value"] = np.asarray(t).tolist()

    thread = threading.Thread(target=waiter)
    thread.start()
    wait_for(lambda: client.stats()["waiting_gets"] == 1, "the get to wait in the daemon")
    ticks = 0
    for _ in range(100_000):  # pure-Python work, needs the GIL, while the get waits
        ticks += 1
    assert thread.is_alive() and client.stats()["waiting_gets"] == 1  # still waiting
    client.put("gil/late", np.array([4, 2], np.int16))
    thread.join(timeout=60)
    assert result == {"value": [4, 2]}
    assert ticks == 100_000


def test_ctrl_c_interrupts_an_endless_get(client, peers):
    p = peers(torch=False)
    p.send("wait_forever", name="never/published")
    assert p._read() == {"waiting": True}
    # Blocked in get() once the daemon has its wait (this test's daemon: no other waits).
    wait_for(lambda: client.stats()["waiting_gets"] == 1, "the peer's get to wait")
    os.kill(p.proc.pid, signal.SIGINT)
    assert p._read() == {"interrupted": True}


SHUTDOWN_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np, torch, tensorbroker
    c = tensorbroker.connect(sys.argv[1])
    c.put("exit/a", np.arange(10, dtype=np.float32), replace=True)
    t = c.get("exit/a")
    keep = [t, np.asarray(t), torch.from_dlpack(t), t.__dlpack__(),
            t.__dlpack__(max_version=(1, 0)), np.from_dlpack(t)]
    cycle = {"views": keep}
    cycle["self"] = cycle            # only the garbage collector frees this
    w = c.create("exit/w", (4,), "float64")
    wt = torch.from_dlpack(w)        # an unsealed tensor and a view of it, never sealed
    import threading
    threading.Thread(target=lambda: c.get("exit/never"), daemon=True).start()
    threading.Thread(target=lambda: c.get("exit/never", timeout=1e300), daemon=True).start()
    print("holding", flush=True)
""")


def test_tensors_alive_at_interpreter_exit_are_harmless(client, daemon):
    done = subprocess.run([sys.executable, "-c", SHUTDOWN_SCRIPT, daemon.socket],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "holding\n"
    assert done.stderr == ""
    wait_for(lambda: client.stats()["leases"] == 0, "the exited process's leases")
    assert client.stats()["pending"] == 0
    with pytest.raises(tensorbroker.NotFound):
        client.stat("exit/w")


FORK_SCRIPT = textwrap.dedent("""
    import os, sys
    import numpy as np, tensorbroker

    def run_child(check):
        pid = os.fork()
        if pid == 0:
            try:
                os._exit(check())
            except BaseException as e:  # anything else is a failure of its own
                print("child:", repr(e), file=sys.stderr, flush=True)
                os._exit(9)
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])

    c = tensorbroker.connect(sys.argv[1])
    c.put("fork/a", np.arange(3, dtype=np.float32), replace=True)
    print("after-connect", flush=True)

    def refused():
        try:
            tensorbroker.connect(sys.argv[1])
            return 1
        except tensorbroker.FailedPrecondition as e:
            if "fork()" not in str(e) or "spawn" not in str(e):
                return 2
        try:
            c.stat("fork/a")
            return 3
        except tensorbroker.FailedPrecondition:
            pass
        try:
            c.get("fork/a")
            return 4
        except tensorbroker.FailedPrecondition:
            pass
        c.close()  # leaves the parent's connection alone
        return 0

    print("refused", run_child(refused), flush=True)
    # The parent goes on.
    t = c.get("fork/a")
    print("parent", np.asarray(t).tolist(), c.stat("fork/a")["leases"], flush=True)
""")


def test_a_child_forked_after_connect_is_refused_with_what_to_do_and_the_parent_goes_on(daemon):
    """gRPC does not survive fork(): a child of a process that connected gets FailedPrecondition
    (naming spawn) from connect() and from the client it inherited, instead of hanging the
    parent's calls; the parent's client goes on. A child forked before the first connect may
    connect."""
    # Forked before any connect: the child connects (a fresh process, so nothing connected yet).
    before = subprocess.run(
        [sys.executable, "-c", textwrap.dedent("""
            import os, sys, tensorbroker
            pid = os.fork()
            if pid == 0:
                c = tensorbroker.connect(sys.argv[1])
                c.ping()
                c.close()
                os._exit(0)
            code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
            c = tensorbroker.connect(sys.argv[1])
            c.ping()
            print("child", code, flush=True)
        """), daemon.socket], capture_output=True, text=True, timeout=120)
    assert before.returncode == 0, before.stderr
    assert before.stdout.split() == ["child", "0"]
    after = subprocess.run([sys.executable, "-c", FORK_SCRIPT, daemon.socket],
                           capture_output=True, text=True, timeout=120)
    assert after.returncode == 0, after.stderr
    assert after.stdout.splitlines() == ["after-connect", "refused 0", "parent [0.0, 1.0, 2.0] 1"]
