"""End-to-end tests of the `tensorbroker` CLI against a real tensorbrokerd.

Run by ctest (test `cli.end_to_end`) as `/usr/bin/python3 -m pytest tests/cli/test_cli.py`
with the binaries under test in $TENSORBROKER_CLI and $TENSORBROKERD. The module starts its
own daemon on a private socket and stops it with SIGTERM at the end, expecting exit status 0.
"""

import fcntl
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from daemon_wait import wait_for  # noqa: E402  (tests/python/daemon_wait.py)

HANG_GUARD = 60  # seconds; a bound on waits, never a measurement
CLI = os.environ.get("TENSORBROKER_CLI", "")
DAEMON = os.environ.get("TENSORBROKERD", "")

pytestmark = pytest.mark.skipif(
    not (CLI and DAEMON), reason="set TENSORBROKER_CLI and TENSORBROKERD to the binaries")

STAT_KEYS = {"name", "dtype", "shape", "strides", "nbytes", "device", "sealed", "mutable",
             "version", "leases", "created_unix_ms", "owner_uid", "readers", "keep",
             "kept_versions", "ephemeral", "origin"}
STATS_KEYS = {"capacity_bytes", "used_bytes", "reserved_bytes", "tensors", "leases",
              "clients", "segments", "pending", "waiting_gets", "watchers"}
POOL_KEYS = {"device", "handles", "capacity_bytes", "used_bytes", "reserved_bytes", "segments"}
USER_KEYS = {"uid", "user", "bytes", "tensors", "quota_bytes", "quota_tensors"}


class Broker:
    def __init__(self, workdir, socket_path, process, log_path):
        self.workdir = workdir
        self.socket = socket_path
        self.process = process
        self.log_path = log_path

    def log(self):
        with open(self.log_path, "r", errors="replace") as f:
            return f.read()

    def cli(self, *args, input=None, env=None, socket=True, timeout=60):
        """Runs the CLI; returns CompletedProcess with bytes stdout and text-ish stderr."""
        argv = [CLI] + (["--socket", self.socket] if socket else []) + [str(a) for a in args]
        full_env = dict(os.environ)
        if env:
            full_env.update(env)
        proc = subprocess.run(argv, input=input, capture_output=True, env=full_env,
                              timeout=timeout)
        proc.err = proc.stderr.decode("utf-8", "replace")
        proc.out = proc.stdout.decode("utf-8", "replace")
        return proc

    def ok(self, *args, **kwargs):
        proc = self.cli(*args, **kwargs)
        assert proc.returncode == 0, (
            f"tensorbroker {' '.join(map(str, args))} exited {proc.returncode}\n"
            f"stdout: {proc.out}\nstderr: {proc.err}\ndaemon log:\n{self.log()[-4000:]}")
        return proc

    def json(self, *args):
        return json.loads(self.ok(*args, "--json").out)

    def path(self, name):
        return os.path.join(self.workdir, name)


def serve():
    """A daemon on a private socket, yielded as a Broker; stopped with SIGTERM at the end,
    expecting exit status 0."""
    # A short path: Unix socket paths are limited to 107 bytes.
    workdir = tempfile.mkdtemp(prefix="tbcli-")
    socket_path = os.path.join(workdir, "broker.sock")
    log_path = os.path.join(workdir, "daemon.log")
    with open(log_path, "wb") as log:
        process = subprocess.Popen([DAEMON, "--socket", socket_path, "--capacity", "256M"],
                                   stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
    b = Broker(workdir, socket_path, process, log_path)
    try:
        wait_for(process, f"serving on {socket_path}",
                 lambda: b.cli("stats", timeout=10).returncode == 0, log_path, interval=0.1)
        yield b
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            code = "killed after SIGTERM timed out"
        log_text = b.log()
        shutil.rmtree(workdir, ignore_errors=True)
    assert code == 0, f"tensorbrokerd exit status {code} after SIGTERM; log:\n{log_text}"


@pytest.fixture(scope="module")
def broker():
    """The module's daemon: tests that use it check per-name figures and their own user's."""
    yield from serve()


@pytest.fixture
def own_broker():
    """A daemon of this test alone, for daemon-wide figures (stats(), watchers): nothing an
    earlier test left (a lease a CLI that exited still had, a watch ending) moves them."""
    yield from serve()


def save(broker, filename, array):
    path = broker.path(filename)
    np.save(path, array)  # np.save keeps the name when it already ends in .npy
    return path


def roundtrip(broker, name, array, *put_flags):
    src = save(broker, name.replace("/", "_") + ".in.npy", array)
    broker.ok("put", name, src, *put_flags)
    dst = broker.path(name.replace("/", "_") + ".out.npy")
    broker.ok("get", name, dst)
    return np.load(dst), dst


def wait_for_leases(broker, name, expected, seconds=HANG_GUARD):
    deadline = time.monotonic() + seconds
    while True:
        info = broker.json("stat", name)
        if info["leases"] == expected or time.monotonic() > deadline:
            return info
        time.sleep(0.05)


# ---- data round trips ---------------------------------------------------------------------

def test_float32_roundtrip_is_equal_and_byte_identical_to_numpy(broker):
    a = (np.arange(12, dtype=np.float32).reshape(3, 4) * 1.5 - 4).astype(np.float32)
    back, dst = roundtrip(broker, "rt/f32", a)
    assert back.dtype == np.float32
    assert back.shape == (3, 4)
    np.testing.assert_array_equal(back, a)
    # The file is exactly what np.save writes (format 1.0, same header and padding).
    buf = io.BytesIO()
    np.save(buf, a)
    with open(dst, "rb") as f:
        assert f.read() == buf.getvalue()


def test_fortran_order_file_roundtrips(broker):
    a = np.asfortranarray(np.arange(24, dtype=np.int32).reshape(2, 3, 4))
    src = save(broker, "fortran.npy", a)
    with open(src, "rb") as f:
        assert b"'fortran_order': True" in f.read(256)
    broker.ok("put", "rt/fortran", src)
    info = broker.json("stat", "rt/fortran")
    assert info["shape"] == [2, 3, 4]
    assert info["strides"] == [12, 4, 1]
    dst = broker.path("fortran.out.npy")
    broker.ok("get", "rt/fortran", dst)
    back = np.load(dst)
    np.testing.assert_array_equal(back, a)
    assert back.flags.c_contiguous


def test_large_fortran_array_roundtrips(broker):
    a = np.asfortranarray(np.random.default_rng(1).standard_normal((700, 900)).astype(np.float32))
    back, _ = roundtrip(broker, "rt/fortran_large", a)
    np.testing.assert_array_equal(back, a)


@pytest.mark.parametrize("kind", ["slice", "transpose"])
def test_non_contiguous_arrays_roundtrip(broker, kind):
    base = np.arange(80, dtype=np.float64).reshape(8, 10)
    a = base[::2, 1::3] if kind == "slice" else base.T
    assert not a.flags.c_contiguous
    back, _ = roundtrip(broker, f"rt/noncontig_{kind}", a)
    np.testing.assert_array_equal(back, a)


@pytest.mark.parametrize("array", [
    np.array([[True, False, True], [False, False, True]]),
    np.array([-128, -1, 0, 1, 127], dtype=np.int8),
    np.array([0, 1, 2**63, 2**64 - 1], dtype=np.uint64),
    np.array([1 + 2j, -3.5 - 0.25j, np.inf + 0j], dtype=np.complex128).reshape(3, 1),
    np.array([0.5, -2.0, np.inf, 65504.0], dtype=np.float16),
    np.arange(6, dtype=np.int16).reshape(1, 2, 3),
    np.arange(7, dtype=np.uint8),
    np.arange(5, dtype=np.uint32),
    np.arange(5, dtype=np.int64) - 2,
    np.array([1.25, -2.5], dtype=np.complex64),
    np.float64(3.25) * np.ones(()),
    np.zeros((0, 3), dtype=np.float32),
], ids=["bool", "int8", "uint64", "complex128", "float16", "int16", "uint8", "uint32", "int64",
        "complex64", "scalar", "empty"])
def test_dtypes_roundtrip(broker, array):
    name = f"dtypes/{array.dtype.name}_{array.ndim}d_{array.size}"
    back, _ = roundtrip(broker, name, array)
    assert back.dtype == array.dtype
    assert back.shape == array.shape
    np.testing.assert_array_equal(back, array)
    info = broker.json("stat", name)
    assert info["dtype"] == array.dtype.name
    assert info["nbytes"] == array.nbytes


def test_stdin_and_stdout(broker):
    a = np.arange(10, dtype=np.int32)
    buf = io.BytesIO()
    np.save(buf, a)
    broker.ok("put", "pipe/a", "-", input=buf.getvalue())
    out = broker.ok("get", "pipe/a", "-")
    np.testing.assert_array_equal(np.load(io.BytesIO(out.stdout)), a)


# ---- metadata ------------------------------------------------------------------------------

def test_stat_json_fields_and_values(broker):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    broker.ok("put", "meta/t", save(broker, "meta.npy", a))
    info = broker.json("stat", "meta/t")
    assert STAT_KEYS <= set(info)
    assert info["name"] == "meta/t"
    assert info["dtype"] == "float32"
    assert info["shape"] == [2, 3]
    assert info["strides"] == [3, 1]
    assert info["nbytes"] == 24
    assert info["device"] == "cpu"
    assert info["sealed"] is True
    assert info["mutable"] is False
    assert isinstance(info["version"], int) and info["version"] >= 1
    assert info["leases"] == 0
    assert isinstance(info["created_unix_ms"], int)
    assert abs(info["created_unix_ms"] / 1000 - time.time()) < 600

    # A get takes a lease for as long as the CLI runs; it is gone once the CLI exits.
    broker.ok("get", "meta/t", broker.path("meta.out.npy"))
    assert wait_for_leases(broker, "meta/t", 0)["leases"] == 0

    human = broker.ok("stat", "meta/t").out
    lines = dict(line.split(":", 1) for line in human.splitlines())
    assert lines["dtype"].strip() == "float32"
    assert lines["shape"].strip() == "[2, 3]"
    assert lines["device"].strip() == "cpu"
    assert lines["sealed"].strip() == "true"
    # Values are aligned in one column.
    assert len({len(line) - len(line.split(":", 1)[1].lstrip()) for line in human.splitlines()}) == 1


def test_mutable_flag(broker):
    broker.ok("put", "meta/mutable", save(broker, "mut.npy", np.ones(3)), "--mutable")
    info = broker.json("stat", "meta/mutable")
    assert info["mutable"] is True
    assert info["dtype"] == "float64"


def test_ls_with_prefix(broker):
    for name in ("lsA/x", "lsA/y", "lsB/z"):
        broker.ok("put", name, save(broker, name.replace("/", "_") + ".npy",
                                     np.zeros((2, 2), dtype=np.int16)))
    listed = broker.json("ls", "lsA/")
    assert isinstance(listed, list)
    assert sorted(t["name"] for t in listed) == ["lsA/x", "lsA/y"]
    for t in listed:
        assert STAT_KEYS <= set(t)
        assert t == broker.json("stat", t["name"])
    assert broker.json("ls", "no-such-prefix") == []
    everything = {t["name"] for t in broker.json("ls")}
    assert {"lsA/x", "lsA/y", "lsB/z"} <= everything

    human = broker.ok("ls", "lsA").out.splitlines()
    assert human[0].split() == ["NAME", "DTYPE", "SHAPE", "SIZE", "VERSION", "LEASES"]
    assert [line.split()[0] for line in human[1:]] == ["lsA/x", "lsA/y"]
    assert "int16" in human[1] and "[2, 2]" in human[1] and "8 B" in human[1]


def test_stats(own_broker):
    broker = own_broker
    before = broker.json("stats")
    assert set(before) == STATS_KEYS | {"pools", "users", "peers", "remotes"}
    assert before["peers"] == []  # no peer listener: no peer ever called
    assert before["remotes"] == []  # no remote[] settings: nothing fetched
    assert all(isinstance(before[k], int) for k in STATS_KEYS)
    assert before["capacity_bytes"] == 256 << 20
    # Every memory pool: the CPU one first, with the top-level figures; then each GPU served.
    assert before["pools"][0] == {"device": "cpu", "handles": "memfd", "capacity_bytes": 256 << 20,
                                  "used_bytes": before["used_bytes"],
                                  "reserved_bytes": before["reserved_bytes"],
                                  "segments": before["segments"]}
    assert all(set(pool) == POOL_KEYS and pool["device"].startswith("cuda:")
               for pool in before["pools"][1:])
    assert before["tensors"] == len(broker.json("ls"))
    broker.ok("put", "stats/new", save(broker, "stats.npy", np.zeros(1000, dtype=np.float64)))
    after = broker.json("stats")
    assert after["tensors"] == before["tensors"] + 1
    assert after["used_bytes"] >= before["used_bytes"] + 8000
    assert after["used_bytes"] <= after["capacity_bytes"]
    # What each user holds (every user for root, an administrator): this one 8000 bytes more.
    def mine(stats):
        rows = [u for u in stats["users"] if u["uid"] == os.getuid()]
        return rows[0] if rows else {"bytes": 0, "tensors": 0}
    assert all(set(u) == USER_KEYS for u in after["users"])
    assert mine(after)["bytes"] == mine(before)["bytes"] + 8000
    assert mine(after)["tensors"] == mine(before)["tensors"] + 1
    human = broker.ok("stats").out
    assert "256.0 MiB" in human
    assert "tensors:" in human


# ---- publishing semantics ------------------------------------------------------------------

def test_put_existing_name_needs_replace(broker):
    first = save(broker, "dup1.npy", np.arange(4, dtype=np.float32))
    second = save(broker, "dup2.npy", np.arange(4, dtype=np.float32) * 10)
    broker.ok("put", "dup/t", first)
    v1 = broker.json("stat", "dup/t")["version"]

    proc = broker.cli("put", "dup/t", second)
    assert proc.returncode == 1
    assert proc.err.startswith("tensorbroker: ")
    assert "ALREADY_EXISTS" in proc.err or "already" in proc.err
    assert "dup/t" in proc.err
    roundtrip(broker, "dup/t_check", np.zeros(1))  # the daemon is still fine
    broker.ok("get", "dup/t", broker.path("dup.out.npy"))
    np.testing.assert_array_equal(np.load(broker.path("dup.out.npy")), np.arange(4))

    broker.ok("put", "dup/t", second, "--replace")
    v2 = broker.json("stat", "dup/t")["version"]
    assert v2 > v1
    broker.ok("get", "dup/t", broker.path("dup.out.npy"))
    np.testing.assert_array_equal(np.load(broker.path("dup.out.npy")), np.arange(4) * 10)


def test_put_device(broker):
    source = save(broker, "dev.npy", np.arange(6, dtype=np.int16).reshape(2, 3))
    broker.ok("put", "dev/cpu", source, "--device", "cpu")
    assert broker.json("stat", "dev/cpu")["device"] == "cpu"
    roundtrip(broker, "dev/cpu_check", np.zeros(1))
    proc = broker.cli("put", "dev/gpu", source, "--device=cuda:0")
    if proc.returncode == 0:  # a usable GPU: the tensor lives there, and get copies it out
        assert broker.json("stat", "dev/gpu")["device"] == "cuda:0"
        broker.ok("get", "dev/gpu", broker.path("dev.out.npy"))
        np.testing.assert_array_equal(np.load(broker.path("dev.out.npy")),
                                      np.arange(6, dtype=np.int16).reshape(2, 3))
        return
    assert proc.returncode == 1, proc.err
    assert "FAILED_PRECONDITION" in proc.err and "cuda:0" in proc.err, proc.err
    assert "dev/gpu" not in {t["name"] for t in broker.json("ls")}


def test_rm_then_stat_fails(broker):
    broker.ok("put", "rm/t", save(broker, "rm.npy", np.ones(2)))
    broker.ok("rm", "rm/t")
    for args in (("stat", "rm/t"), ("get", "rm/t", broker.path("rm.out.npy")), ("rm", "rm/t")):
        proc = broker.cli(*args)
        assert proc.returncode == 1, args
        assert "NOT_FOUND" in proc.err, proc.err
        assert "rm/t" in proc.err
    assert not os.path.exists(broker.path("rm.out.npy"))
    assert "rm/t" not in {t["name"] for t in broker.json("ls")}


# ---- errors --------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["bad name!", "/abs", "a//b", "../up", "x" * 256])
def test_bad_name_is_an_operation_error_naming_it(broker, name):
    for args in (("stat", name), ("rm", name), ("get", name, broker.path("bad.npy")),
                 ("put", name, save(broker, "badname.npy", np.ones(1)))):
        proc = broker.cli(*args)
        assert proc.returncode == 1, (args, proc.err)
        assert proc.err.startswith("tensorbroker: ")
        assert "INVALID_ARGUMENT" in proc.err
        assert name[:60] in proc.err


@pytest.mark.parametrize("args", [
    [],
    ["frobnicate"],
    ["stat"],
    ["stat", "a", "b"],
    ["put", "a"],
    ["get", "a"],
    ["rm"],
    ["stats", "extra"],
    ["ls", "a", "b"],
    ["ls", "--foo"],
    ["stats", "--replace"],
    ["get", "a", "b.npy", "--json"],
    ["help", "nosuchcommand"],
    ["put", "a", "b.npy", "--device"],
    ["put", "a", "b.npy", "--device", "tpu"],
    ["put", "a", "b.npy", "--device=cuda:-1"],
    ["get", "a", "b.npy", "--device", "cpu"],
    ["health", "extra"],
    ["health", "--timeout"],
    ["health", "--timeout", "0"],
    ["health", "--timeout=soon"],
    ["stats", "--timeout", "1"],
])
def test_usage_errors_exit_2(broker, args):
    proc = broker.cli(*args)
    assert proc.returncode == 2, (args, proc.err)
    assert proc.err.startswith("tensorbroker: ")
    assert proc.stdout == b""


def test_socket_option_usage_errors(broker):
    assert broker.cli("--socket", socket=False).returncode == 2
    assert broker.cli("--socket=", "stats", socket=False).returncode == 2


def test_help(broker):
    proc = broker.ok("--help", socket=False)
    for word in ("ls", "stat", "put", "get", "rm", "stats", "--socket", "--json", "--replace",
                 "--mutable", "Exit status"):
        assert word in proc.out
    for command in ("ls", "stat", "put", "get", "rm", "stats", "health"):
        text = broker.ok(command, "--help", socket=False).out
        assert text.startswith(f"Usage: tensorbroker [--socket PATH] {command}")
        assert broker.ok("help", command, socket=False).out == text
    assert "|V2" in broker.ok("get", "--help", socket=False).out
    assert "fortran" in broker.ok("put", "--help", socket=False).out.lower()
    assert broker.ok("--version", socket=False).out.startswith("tensorbroker ")


def npy_bytes(header, data=b"", major=1):
    """A .npy file with the given header dict text, padded as NumPy pads it."""
    prefix = 10 if major == 1 else 12
    header = header.encode()
    header += b" " * (63 - (prefix + len(header)) % 64) + b"\n"
    length = len(header).to_bytes(2 if major == 1 else 4, "little")
    return b"\x93NUMPY" + bytes([major, 0]) + length + header + data


GOOD_DICT = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }"


@pytest.mark.parametrize("content,message", [
    (b"", "not a valid .npy file"),
    (b"this is not a numpy file", "magic"),
    (npy_bytes(GOOD_DICT)[:40], "truncated"),
    (npy_bytes(GOOD_DICT, b"\0" * 7), "truncated"),
    (npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (99999, 99999), }"),
     "needs 39999200004 data bytes"),
    (npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2**40,), }"), "shape"),
    (npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }"), "negative"),
    (npy_bytes("{'descr': '<f4', 'fortran_order': False, "
               "'shape': (4294967296, 4294967296, 4294967296), }"), "too many elements"),
    (npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (" + "1, " * 40 + "), }"),
     "dimensions"),
    (npy_bytes("{'descr': '<f4', 'fortran_order': 0, 'shape': (2,), }"), "True or False"),
    (npy_bytes("{'descr': '<f4', 'shape': (2,), }"), "fortran_order"),
    (npy_bytes("__import__('os').system('true')"), "'{'"),
    (npy_bytes(GOOD_DICT, b"\0" * 8, major=9), "version"),
    (b"\x93NUMPY\x02\x00\xff\xff\xff\xff", "at most"),
])
def test_garbage_npy_gives_clear_error(broker, content, message):
    path = broker.path("garbage.npy")
    with open(path, "wb") as f:
        f.write(content)
    proc = broker.cli("put", "garbage/t", path)
    assert proc.returncode == 1, proc.err
    assert proc.err.startswith("tensorbroker: put 'garbage/t': INVALID_ARGUMENT: ")
    assert path in proc.err
    assert message in proc.err, proc.err
    assert len(proc.err.splitlines()) == 1


def test_truncated_real_file_and_random_garbage(broker):
    src = save(broker, "full.npy", np.arange(100, dtype=np.float64))
    with open(src, "rb") as f:
        data = f.read()
    rng = np.random.default_rng(7)
    for cut in (0, 5, 9, 60, 127, 128, 500, len(data) - 1):
        path = broker.path("cut.npy")
        with open(path, "wb") as f:
            f.write(data[:cut])
        proc = broker.cli("put", "garbage/cut", path)
        assert proc.returncode == 1, (cut, proc.err)
        assert "not a valid .npy file" in proc.err
    for _ in range(20):
        corrupted = bytearray(data[:128])
        for i in rng.integers(0, 128, size=3):
            corrupted[i] = int(rng.integers(0, 256))
        path = broker.path("corrupt.npy")
        with open(path, "wb") as f:
            f.write(bytes(corrupted) + data[128:])
        proc = broker.cli("put", "garbage/corrupt", path, "--replace")
        assert proc.returncode in (0, 1), proc.err  # never a crash
        if proc.returncode == 1:
            assert proc.err.startswith("tensorbroker: ")


def test_unsupported_npy_contents(broker):
    cases = [
        (np.arange(4, dtype=">f4"), "big-endian"),
        (np.array([{"a": 1}, None], dtype=object), "object"),
        (np.array(["ab", "c"]), "string"),
        (np.zeros(2, dtype=[("x", "<f4"), ("y", "<i4")]), "structured"),
        (np.zeros(2, dtype="datetime64[ns]"), "datetime"),
    ]
    for array, message in cases:
        path = broker.path("unsupported.npy")
        np.save(path, array, allow_pickle=True)
        proc = broker.cli("put", "unsupported/t", path)
        assert proc.returncode == 1, (array.dtype, proc.err)
        assert message in proc.err, proc.err
    # One-byte big-endian data has no byte order: fine.
    back, _ = roundtrip(broker, "unsupported/be_int8", np.arange(3, dtype=">i1"))
    np.testing.assert_array_equal(back, np.arange(3))


def test_file_errors(broker):
    proc = broker.cli("put", "files/t", broker.path("does-not-exist.npy"))
    assert proc.returncode == 1
    assert "does-not-exist.npy" in proc.err and "No such file" in proc.err
    broker.ok("put", "files/t", save(broker, "files.npy", np.ones(3)))
    proc = broker.cli("get", "files/t", os.path.join(broker.workdir, "no-dir", "x.npy"))
    assert proc.returncode == 1
    assert "no-dir" in proc.err


def test_default_socket_from_environment(broker):
    proc = broker.cli("stats", "--json", socket=False, env={"TENSORBROKER_SOCKET": broker.socket})
    assert proc.returncode == 0, proc.err
    assert STATS_KEYS <= set(json.loads(proc.out))
    # --socket may also follow the command.
    proc = broker.cli("stats", "--socket", broker.socket, socket=False)
    assert proc.returncode == 0, proc.err


def test_no_daemon_is_an_operation_error(broker):
    missing = os.path.join(broker.workdir, "nobody-here.sock")
    start = time.monotonic()
    proc = broker.cli("--socket", missing, "stats", socket=False)
    assert proc.returncode == 1
    assert "cannot connect" in proc.err and missing in proc.err
    assert time.monotonic() - start < 30


def test_health_says_serving_and_exits_0(broker):
    proc = broker.ok("health")
    assert proc.out == "SERVING\n"
    assert broker.ok("health", "--timeout", "0.5").out == "SERVING\n"


def test_health_without_a_daemon_fails_fast_naming_the_socket(broker):
    missing = os.path.join(broker.workdir, "nobody-here.sock")
    start = time.monotonic()
    proc = broker.cli("--socket", missing, "health", "--timeout", "2", socket=False)
    took = time.monotonic() - start
    assert proc.returncode == 1
    assert proc.err.startswith(f"tensorbroker: health of tensorbrokerd at {missing}: UNAVAILABLE")
    assert proc.stdout == b""
    assert took < 30  # a hang guard only; the deadline bounds it


def test_a_socket_path_that_does_not_exist_is_said_at_once(broker):
    """Nothing at the path and no daemon starting there: said at once, naming the path, not
    after the timeout (health: a 60 s one here; the other commands wait for a daemon that is
    starting, which nothing shows here, and say it after half a second)."""
    for missing in (os.path.join(broker.workdir, "nobody-here.sock"),
                    os.path.join(broker.workdir, "no-dir", "broker.sock")):
        start = time.monotonic()
        proc = broker.cli("--socket", missing, "health", "--timeout", "60", socket=False,
                          timeout=HANG_GUARD * 2)
        took = time.monotonic() - start
        assert (proc.returncode, proc.out) == (1, "")
        assert proc.err == (f"tensorbroker: health of tensorbrokerd at {missing}: "
                            + missing_path_error(missing))
        assert took < 30, took  # long before the 60 s timeout: it did not wait for it
        for command in (["stats"], ["ls"], ["stat", "a/b"]):
            proc = broker.cli("--socket", missing, *command, socket=False)
            assert (proc.returncode, proc.out) == (1, "")
            assert proc.err == (f"tensorbroker: cannot connect to tensorbrokerd at {missing}: "
                                + missing_path_error(missing))


def test_a_daemon_on_its_way_up_is_waited_for(broker):
    """A daemon starting at a path takes "<path>.lock", then binds the socket, then serves.
    A command started meanwhile waits for it: while the lock is held and the path is still
    missing, it is looked for again. Played here by this test: it holds the lock of a path
    nothing serves yet, starts `stats` there, and after a while makes the path lead to the
    module's daemon (symbolic links to its two sockets); `stats` then reaches that daemon."""
    path = os.path.join(broker.workdir, "starting.sock")
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cli = subprocess.Popen([CLI, "--socket", path, "stats", "--json"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            # Past the half-second grace it is still waiting (on a loaded machine it may start
            # slower than that; then this shows less, and still holds). Its 5 s to connect run
            # meanwhile: the path appears well within them.
            with pytest.raises(subprocess.TimeoutExpired):
                cli.wait(timeout=1)
            os.symlink(broker.socket + ".fd", path + ".fd")  # the local channel first
            os.symlink(broker.socket, path)
            out, err = cli.communicate(timeout=HANG_GUARD)
        finally:
            cli.kill()
            cli.wait()
    assert (cli.returncode, err) == (0, ""), err
    assert STATS_KEYS <= set(json.loads(out))


def missing_path_error(path):
    return (f"UNAVAILABLE: {path} does not exist: no tensorbrokerd serves there (is it running? "
            "see --socket / $TENSORBROKER_SOCKET)\n")


def test_watch_prints_one_line_per_event_as_it_happens(own_broker):
    broker = own_broker
    npy = save(broker, "w.npy", np.arange(4, dtype=np.float32))
    watchers = broker.json("stats")["watchers"]
    watch = subprocess.Popen([CLI, "--socket", broker.socket, "watch", "clw/", "--json",
                              "--count", "3"], stdout=subprocess.PIPE, text=True)
    try:
        wait_for(broker.process, "watched by one more watcher",
                 lambda: broker.json("stats")["watchers"] == watchers + 1, broker.log_path)
        broker.ok("put", "clw/a", npy)
        broker.ok("put", "other/a", npy)
        broker.ok("put", "clw/a", npy, "--replace")
        broker.ok("rm", "clw/a")
        out, _ = watch.communicate(timeout=60)
    finally:
        watch.kill()
    assert watch.returncode == 0
    events = [json.loads(line) for line in out.splitlines()]
    assert [(e["kind"], e["name"]) for e in events] == [
        ("published", "clw/a"), ("replaced", "clw/a"), ("deleted", "clw/a")]
    assert events[1]["previous_version"] == events[0]["version"]
    assert set(events[0]["tensor"]) == STAT_KEYS and events[0]["tensor"]["shape"] == [4]
    assert [e["sequence"] for e in events] == sorted(e["sequence"] for e in events)
    # Resuming after the first: the other two again, as text lines.
    text = broker.ok("watch", "clw/", "--after", events[0]["sequence"], "--count", "2").out
    assert text.splitlines() == [
        f"{events[1]['sequence']} replaced clw/a v{events[1]['version']} float32[4] 16 B",
        f"{events[2]['sequence']} deleted clw/a v{events[2]['version']} float32[4] 16 B"]
    bad = broker.cli("watch", "bad prefix")
    assert bad.returncode == 1 and "INVALID_ARGUMENT" in bad.err
