"""tensorbrokerd's config file, end to end with the real binary: --print-config shows the
effective settings (flags over the file), bad files stop it at start with exit status 2 and a
message naming file:line, and SIGHUP re-reads the file, applies the log level at once and says
what would need a restart."""

import os
import signal
import subprocess
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from daemon_wait import log_line, wait_for  # noqa: E402  (tests/python/daemon_wait.py)

DAEMON = os.environ.get("TENSORBROKERD", "")
pytestmark = pytest.mark.skipif(not DAEMON, reason="set TENSORBROKERD to the binary")
HANG_GUARD = 60  # seconds; only against hangs


@pytest.fixture
def workdir():
    with tempfile.TemporaryDirectory(prefix="tbconf.") as d:
        yield d


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def run(*args):
    return subprocess.run([DAEMON, *args], capture_output=True, text=True, timeout=HANG_GUARD)


def test_print_config_shows_the_file_under_the_flags(workdir):
    conf = os.path.join(workdir, "tb.conf")
    sock = os.path.join(workdir, "b.sock")
    write(conf, f"# test\nsocket = {sock}\ncapacity = 32M\nlog-level = warning\n"
                "metrics-listen = 127.0.0.1:9464\n")
    done = run("--config", conf, "--log-level", "debug", "--print-config")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"# tensorbrokerd's effective configuration (config file: {conf})",
        f"socket = {sock}",
        "capacity = 33554432  # 32.0 MiB",
        "# cuda-capacity: not set: half of each GPU's memory",
        "cuda-handles = ipc",
        "log-level = debug",
        "metrics-listen = 127.0.0.1:9464",
        "# peer-listen: not set: no peers (no TCP)",
        "# tls-cert: not set: none",
        "# tls-key: not set: none",
        "# tls-ca: not set: none",
        "# admin-group: not set: root only",
        "default-readers = *",
        "quota-bytes = 0  # unlimited",
        "quota-tensors = 0  # unlimited",
        "pending-timeout = 1m",
        "handshake-timeout = 10s",
        "max-connections = 4096",
        "max-lease-tables-per-uid = 64",
        "fetch-stall-timeout = 10s",
        "watch-log = 16384",
    ]
    # An empty flag turns the file's metrics-listen off.
    done = run("--config", conf, "--metrics-listen", "", "--print-config")
    assert done.returncode == 0, done.stderr
    assert "# metrics-listen: not set: no HTTP /metrics" in done.stdout.splitlines()


@pytest.mark.parametrize("text, message", [
    ("capacty = 4G\n", "tb.conf:1: unknown key 'capacty' (keys: socket, capacity, cuda-capacity, cuda-handles, log-level, metrics-listen, peer-listen, tls-cert, tls-key, tls-ca, admin-group, default-readers, quota-bytes, quota-tensors, pending-timeout, handshake-timeout, max-connections, max-lease-tables-per-uid, fetch-stall-timeout, watch-log, readers[PREFIX], publishers[PREFIX], quota-bytes[USER], quota-tensors[USER], remote[PREFIX])"),
    ("metrics-listen = 9464\n", "tb.conf:1: metrics-listen '9464': needs HOST:PORT (or :PORT for every interface)"),
    ("\nlog-level = loud\n", "tb.conf:2: log-level 'loud' is not one of error, warning, notice, info, debug"),
    ("capacity 4G\n", "tb.conf:1: expected 'key = value', got 'capacity 4G'"),
    ("capacity = 0\n", "tb.conf:1: capacity must be more than 0"),
])
def test_bad_files_stop_it_at_start_naming_file_and_line(workdir, text, message):
    conf = os.path.join(workdir, "tb.conf")
    write(conf, text)
    done = run("--config", conf, "--socket", os.path.join(workdir, "b.sock"))
    assert done.returncode == 2
    assert done.stderr == f"tensorbrokerd: {conf[:-len('tb.conf')]}{message}\n"
    assert not os.path.exists(os.path.join(workdir, "b.sock"))


def test_the_shipped_example_is_valid(workdir):
    example = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy",
                           "tensorbrokerd.conf")
    done = run("--config", example, "--print-config")
    assert done.returncode == 0, done.stderr
    assert "log-level = info" in done.stdout.splitlines()


def test_an_explicit_config_must_exist(workdir):
    done = run("--config", os.path.join(workdir, "missing.conf"), "--print-config")
    assert done.returncode == 2
    assert "missing.conf: No such file or directory" in done.stderr


def test_sighup_applies_the_log_level_and_names_what_needs_a_restart(workdir):
    conf = os.path.join(workdir, "tb.conf")
    sock = os.path.join(workdir, "b.sock")
    log = os.path.join(workdir, "daemon.log")
    write(conf, f"socket = {sock}\ncapacity = 32M\nlog-level = notice\n")
    with open(log, "w") as out:
        daemon = subprocess.Popen([DAEMON, "--config", conf], stderr=out)

    def wait_for_line(text):
        wait_for(daemon, f"logging '{text}'", lambda: log_line(log, text), log)
    try:
        wait_for(daemon, f"serving on {sock}", lambda: os.path.exists(sock), log)
        write(conf, f"socket = {sock}\ncapacity = 64M\nlog-level = debug\n")
        daemon.send_signal(signal.SIGHUP)
        wait_for_line(f"<5>SIGHUP: configuration reloaded from {conf}: log-level notice -> debug")
        with open(log) as f:
            text = f.read()
        assert ("<4>SIGHUP: capacity changed (33554432 -> 67108864); it takes effect at the "
                "next start") in text
        # A broken file is refused and the running configuration kept.
        write(conf, "log-level = shouting\n")
        daemon.send_signal(signal.SIGHUP)
        wait_for_line("<3>SIGHUP: configuration not reloaded: ")
        assert daemon.poll() is None
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=HANG_GUARD) == 0
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()

