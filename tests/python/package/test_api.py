"""The package's API surface: stat() and stats() match the CLI's --json output field for field;
list, delete and replace; create / seal / abort and the context managers; the default socket;
and `cmake --install` puts an importable package where Debian's python3 looks. (The typed stub
against the module: test_stubs.py.)"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import tensorbroker
from tensorbroker import _core


def cli(daemon, *args):
    binary = os.environ["TENSORBROKER_CLI"]
    out = subprocess.run([binary, "--socket", daemon.socket, *args], capture_output=True,
                         text=True, timeout=60, check=True)
    return json.loads(out.stdout)


def test_stat_and_stats_match_the_cli_json(client, daemon):
    client.put("api/stat", np.arange(24, dtype=np.int16).reshape(2, 3, 4), mutable=True)
    mine = client.stat("api/stat")
    assert mine == cli(daemon, "stat", "api/stat", "--json")
    assert mine["dtype"] == "int16" and mine["shape"] == [2, 3, 4] and mine["mutable"]
    assert mine["strides"] == [12, 4, 1] and mine["nbytes"] == 48 and mine["device"] == "cpu"
    stats = client.stats()
    theirs = cli(daemon, "stats", "--json")
    assert list(stats) == list(theirs)  # the same keys in the same order: common/stats_schema.h
    assert [list(p) for p in stats["pools"]] == [list(p) for p in theirs["pools"]]
    assert [list(u) for u in stats["users"]] == [list(u) for u in theirs["users"]]
    assert stats["tensors"] == theirs["tensors"] and stats["capacity_bytes"] == theirs["capacity_bytes"]
    assert [t["name"] for t in client.list("api/")] == \
        [t["name"] for t in cli(daemon, "ls", "api/", "--json")]


def test_list_delete_and_replace(client):
    for name in ["api/l/b", "api/l/a", "api/other"]:
        client.put(name, np.zeros(2))
    assert [t["name"] for t in client.list("api/l/")] == ["api/l/a", "api/l/b"]
    held = client.get("api/l/a", timeout=0)
    client.delete("api/l/a")
    assert [t["name"] for t in client.list("api/l/")] == ["api/l/b"]
    assert np.asarray(held).tolist() == [0.0, 0.0]  # holders keep valid memory
    v1 = client.stat("api/l/b")["version"]
    client.put("api/l/b", torch.ones(3), replace=True)
    with client.get("api/l/b", timeout=0) as t:
        assert t.version > v1 and t.shape == (3,) and t.dtype == "float32"
    held.release()


def test_create_fill_seal_with_numpy_and_torch_views(client, peers):
    w = client.create("api/made", (2, 3), np.float32)
    assert not w.sealed and not w.readonly
    a, b = np.asarray(w), torch.from_dlpack(w)
    a[0] = [1, 2, 3]
    b[1] = torch.tensor([4.0, 5.0, 6.0])
    with pytest.raises(tensorbroker.NotFound):
        client.get("api/made", timeout=0)  # invisible until sealed
    w.seal()
    assert w.sealed and w.readonly and w.version > 0
    assert not np.asarray(w).flags.writeable  # new views after seal are read-only
    got = peers(torch=False).ask("get", name="api/made", framework="numpy")
    assert got["shape"] == [2, 3]
    with client.get("api/made", timeout=0) as t:
        assert np.asarray(t).tolist() == [[1, 2, 3], [4, 5, 6]]
    del a, b
    w.release()


def test_mutable_create_stays_writable_after_seal(client):
    w = client.create("api/mutable", 4, torch.int64, mutable=True)
    w.seal()
    assert w.mutable and not w.readonly
    np.asarray(w)[:] = 9
    with client.get("api/mutable", timeout=0) as t:
        assert not t.readonly and np.asarray(t).tolist() == [9, 9, 9, 9]


def test_abort_and_context_managers(client):
    w = client.create("api/aborted", (8,), "uint8")
    w.abort()
    assert w.released
    with pytest.raises(tensorbroker.NotFound):
        client.stat("api/aborted")
    with pytest.raises(RuntimeError, match="boom"):
        with client.create("api/ctx", (8,), "uint8") as w2:
            raise RuntimeError("boom")  # leaving unsealed aborts it
    with pytest.raises(tensorbroker.NotFound):
        client.stat("api/ctx")
    assert client.stats()["pending"] == 0
    with client.create("api/ctx", (8,), "uint8") as w3:
        w3.seal()
    assert w3.released and client.stat("api/ctx")["leases"] == 0
    with tensorbroker.connect(client.socket) as other:
        assert other.stat("api/ctx")["sealed"]
    assert other.closed


def test_dtype_spellings(client):
    for spelling in ["float16", np.float16, np.dtype("float16"), torch.float16, torch.half]:
        w = client.create("api/dt", (1,), spelling, replace=True)
        assert w.dtype == "float16", spelling
        w.abort()
    assert repr(client.create("api/dt2", (2, 2), "bfloat16")).startswith(
        "<tensorbroker.Tensor 'api/dt2' bfloat16[2, 2] version 0, unsealed")


def test_torch_subclasses_and_lazy_tensors_put(client):
    weight = torch.nn.Parameter(torch.arange(6, dtype=torch.float32).reshape(2, 3))
    client.put("api/param", weight)  # requires_grad: detached for the copy
    negated = torch.arange(3, dtype=torch.float64)._neg_view()
    client.put("api/neg", negated)
    conj = torch.tensor([1 + 2j], dtype=torch.complex64).conj()
    client.put("api/conj", conj)
    with client.get("api/param", timeout=0) as p, client.get("api/neg", timeout=0) as n, \
            client.get("api/conj", timeout=0) as c:
        assert np.asarray(p).tolist() == [[0, 1, 2], [3, 4, 5]]
        assert np.asarray(n).tolist() == [0, -1, -2]
        assert np.asarray(c).tolist() == [1 - 2j]


def test_array_protocol_dtype_and_copy(client):
    client.put("api/arr", np.arange(4, dtype=np.int32))
    with client.get("api/arr", timeout=0) as t:
        assert t.__array__().dtype == np.int32
        assert t.__array__(np.float64).tolist() == [0.0, 1.0, 2.0, 3.0]
        assert t.__array__(np.int32, copy=False).flags.writeable is False
        copied = t.__array__(copy=True)
        assert copied.flags.writeable and copied.ctypes.data != np.asarray(t).ctypes.data
        with pytest.raises(ValueError, match="copy=False"):
            t.__array__(np.float64, copy=False)


def test_default_socket_follows_the_environment(daemon, monkeypatch):
    monkeypatch.setenv("TENSORBROKER_SOCKET", daemon.socket)
    assert tensorbroker.default_socket() == daemon.socket
    with tensorbroker.connect() as c:
        assert c.socket == daemon.socket
        c.ping()


def test_the_extension_exports_its_entry_point_alone():
    # Anything else it exported could interpose on the C++ runtime's or another extension's
    # symbols (python/src/exports.map).
    done = subprocess.run(["nm", "-D", "--defined-only", _core.__file__], capture_output=True,
                          text=True, check=True)
    assert [line.split()[-1] for line in done.stdout.splitlines()] == ["PyInit__core"]


def test_cmake_install_puts_an_importable_package_where_debian_python_looks(tmp_path):
    build = os.path.dirname(os.path.dirname(tensorbroker.__file__))  # <build>/python
    build = os.path.dirname(build)
    if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
        pytest.skip(f"{tensorbroker.__file__} is not a CMake build tree's (a wheel installed it: "
                    "python.wheel_venv checks that install)")
    cache = open(os.path.join(build, "CMakeCache.txt")).read()
    site_dir = [l.split("=", 1)[1] for l in cache.splitlines()
                if l.startswith("TENSORBROKER_PYTHON_INSTALL_DIR:")][0]
    prefix = [l.split("=", 1)[1] for l in cache.splitlines()
              if l.startswith("CMAKE_INSTALL_PREFIX:")][0]
    # The configured prefix's dir is on Debian python3's own search path ...
    search = subprocess.run(["/usr/bin/python3", "-c", "import sys; print('\\n'.join(sys.path))"],
                            capture_output=True, text=True, check=True).stdout.split()
    assert os.path.join(prefix, site_dir) in search
    # ... and an install into a scratch prefix imports from there, without the build tree.
    subprocess.run(["cmake", "--install", build, "--prefix", str(tmp_path)], check=True,
                   capture_output=True, timeout=300)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}
    env["PYTHONPATH"] = str(tmp_path / site_dir)
    out = subprocess.run(["/usr/bin/python3", "-c",
                          "import tensorbroker; print(tensorbroker.__file__, tensorbroker.__version__)"],
                         capture_output=True, text=True, env=env, cwd="/", timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(str(tmp_path / site_dir / "tensorbroker" / "__init__.py"))
    assert os.path.exists(tmp_path / site_dir / "tensorbroker" / "_core.pyi")
    assert os.path.exists(tmp_path / site_dir / "tensorbroker" / "py.typed")
