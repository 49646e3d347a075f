"""The Python tests' one way of waiting for a daemon (daemon_wait.py), with the real
tensorbrokerd: a daemon that exits on its way up fails the wait at once, not at its deadline,
and the failure quotes the exit status and the daemon's own error line, for wait_for and for
RawDaemon alike; a state never reached fails at the deadline, quoting the log; a long log is
quoted by its last lines."""

import os
import subprocess
import tempfile
import time

import pytest

from daemon_wait import DEADLINE, describe_exit, log_line, quote_log, wait_for
from raw_daemon import RawDaemon

DAEMON = os.environ.get("TENSORBROKERD", "")
pytestmark = pytest.mark.skipif(not DAEMON, reason="set TENSORBROKERD to the binary")

# What tensorbrokerd prints, and exits 2, when --capacity is not a size.
CAPACITY_ERROR = ("tensorbrokerd: --capacity 'nonsense' is not a size "
                  "(examples: 1048576, 512M, 4G, 1.5GiB)")
# "At once" as opposed to the deadline (DEADLINE, 30 s): before half of it has passed, so the
# deadline cannot be what ended the wait, however loaded the machine is (the daemon exits within
# milliseconds of its start).
AT_ONCE = DEADLINE / 2


@pytest.fixture
def workdir():
    with tempfile.TemporaryDirectory(prefix="tbwait.") as d:
        yield d


def start(workdir, *args):
    """tensorbrokerd on workdir/b.sock with its stderr in workdir/daemon.log."""
    sock, log_path = os.path.join(workdir, "b.sock"), os.path.join(workdir, "daemon.log")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([DAEMON, "--socket", sock, *args], stderr=log)
    return proc, sock, log_path


def test_a_daemon_that_exits_fails_the_wait_at_once_with_its_exit_status_and_log(workdir):
    proc, sock, log_path = start(workdir, "--capacity", "nonsense")
    started = time.monotonic()
    with pytest.raises(AssertionError) as failure:
        wait_for(proc, f"serving on {sock}", lambda: os.path.exists(sock), log_path)
    assert time.monotonic() - started < AT_ONCE
    assert str(failure.value) == (f"tensorbrokerd exited (exit status 2) before it was serving "
                                  f"on {sock}; its log:\n  | {CAPACITY_ERROR}\n")


def test_raw_daemon_fails_at_once_with_the_daemons_error():
    started = time.monotonic()
    with pytest.raises(AssertionError) as failure:
        RawDaemon("--capacity", "nonsense", prefix="tbwaitraw.")
    assert time.monotonic() - started < AT_ONCE
    message = str(failure.value)
    assert message.startswith("tensorbrokerd exited (exit status 2) before it was serving on "), \
        message
    assert message.endswith(f"/broker.sock; its log:\n  | {CAPACITY_ERROR}\n"), message


def test_a_state_never_reached_fails_at_the_deadline_quoting_the_log(workdir):
    proc, sock, log_path = start(workdir, "--capacity", "64M", "--log-level", "info")
    try:
        # Its start-up line, waited for the same way; returned as found.
        line = wait_for(proc, "logging its start",
                        lambda: log_line(log_path, "<6>tensorbrokerd serving on "), log_path)
        assert line.startswith(f"<6>tensorbrokerd serving on {sock} capacity=64.0 MiB pid="), line
        with pytest.raises(AssertionError) as failure:
            wait_for(proc, "somewhere it never goes", lambda: False, log_path, timeout=0.1)
        message = str(failure.value)
        assert message.startswith("tensorbrokerd is not somewhere it never goes after 0.1 s; "
                                  "its log:\n"), message
        assert f"\n  | {line}" in message, message
    finally:
        proc.terminate()
        assert proc.wait(timeout=DEADLINE) == 0


def test_a_long_log_is_quoted_by_its_last_lines(workdir):
    path = os.path.join(workdir, "long.log")
    with open(path, "w") as f:
        f.writelines(f"line {i}\n" for i in range(1, 151))
    assert quote_log(path) == "  | (50 earlier lines left out)\n" + "".join(
        f"  | line {i}\n" for i in range(51, 151))
    open(path, "w").close()
    assert quote_log(path) == "  | (empty)\n"
    assert quote_log(None) == "  | (not captured)\n"


def test_exits_are_described_by_status_or_signal():
    assert describe_exit(2) == "exit status 2"
    assert describe_exit(-9) == "killed by signal 9 (SIGKILL)"
