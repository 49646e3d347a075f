"""Tenancy from Python and the CLI: readers and owners on put/create, each user's usage in
stats() / `stats --json` / Prometheus, quotas as tensorbroker.ResourceExhausted, and a process
of another uid (65534) that must not see, read or delete root's private tensors.

The C++ tests cover owners, quotas and the pending timeout in depth; these check what the
package and the CLI show of them."""

import json
import os
import re
import subprocess
import sys
import urllib.request

import numpy as np
import pytest

import tensorbroker
from conftest import AS_UID_65534, HANG_GUARD, Daemon

CLI = os.environ.get("TENSORBROKER_CLI", "")
ROOT_ONLY = pytest.mark.skipif(os.getuid() != 0, reason="switching to uid 65534 needs root")


@pytest.fixture
def fresh_daemon():
    """A daemon of this test alone, so that usage figures are exact."""
    d = Daemon()
    yield d
    assert d.stop() == 0, "tensorbrokerd did not exit cleanly"


def cli(daemon, *args):
    assert CLI and os.path.exists(CLI), "set TENSORBROKER_CLI to the tensorbroker binary"
    return subprocess.run([CLI, "--socket", daemon.socket, *args], capture_output=True, text=True,
                          timeout=HANG_GUARD)


# ---- readers and owners ---------------------------------------------------------------------


def test_put_records_its_owner_and_readers(client):
    info = client.put("ten/put/uid0", np.arange(4, dtype=np.float32), readers=["uid:0"])
    assert (info["owner_uid"], info["readers"]) == (os.getuid(), ["uid:0"])
    stat = client.stat("ten/put/uid0")
    assert (stat["owner_uid"], stat["readers"]) == (os.getuid(), ["uid:0"])

    # One string, split at commas; the daemon answers its canonical form (uids first).
    client.put("ten/put/string", np.zeros(2, np.int64), readers="gid:0, uid:0")
    assert client.stat("ten/put/string")["readers"] == ["uid:0", "gid:0"]
    client.put("ten/put/names", np.zeros(2, np.int64), readers=("user:root", "group:root"))
    assert client.stat("ten/put/names")["readers"] == ["uid:0", "gid:0"]

    # None: the daemon's default (here anyone who may connect).
    client.put("ten/put/default", np.zeros(1, np.uint8))
    assert client.stat("ten/put/default")["readers"] == ["*"]


@pytest.mark.parametrize("readers, names", [
    (["bogus"], "readers[0]"),
    (["uid:0", "uid:x"], "readers[1]"),
    (["user:no-such-user-tb"], "readers[0]"),
    ([1], "readers"),
    (5, "readers"),
    ([], "readers"),
    ("", "readers"),
    (" , ", "readers"),
])
def test_bad_readers_are_invalid_argument_naming_readers(client, readers, names):
    with pytest.raises(tensorbroker.InvalidArgument) as error:
        client.put("ten/bad", np.zeros(1, np.float32), readers=readers)
    assert names in str(error.value), str(error.value)
    with pytest.raises(tensorbroker.InvalidArgument) as error:
        client.create("ten/bad", 1, "float32", readers=readers)
    assert names in str(error.value), str(error.value)
    with pytest.raises(tensorbroker.NotFound):
        client.stat("ten/bad")  # nothing was published, nothing is pending


def test_create_takes_readers(client):
    t = client.create("ten/created", (2, 3), "int32", readers="uid:0")
    np.asarray(t)[...] = np.arange(6, dtype=np.int32).reshape(2, 3)
    t.seal()
    t.release()
    stat = client.stat("ten/created")
    assert (stat["owner_uid"], stat["readers"], stat["sealed"]) == (os.getuid(), ["uid:0"], True)
    np.testing.assert_array_equal(np.asarray(client.get("ten/created", timeout=0)),
                                  np.arange(6, dtype=np.int32).reshape(2, 3))


# ---- each user's usage ----------------------------------------------------------------------


def test_stats_users_count_the_callers_bytes_and_tensors(fresh_daemon):
    with tensorbroker.connect(fresh_daemon.socket) as client:
        client.put("use/a", np.zeros(4, np.float32))            # 16 bytes
        client.put("use/b", np.zeros((10, 10), np.float32))     # 400 bytes
        users = client.stats()["users"]
        assert users == [{"uid": os.getuid(), "user": "root", "bytes": 416, "tensors": 2,
                          "quota_bytes": 0, "quota_tensors": 0}]
        client.delete("use/a")
        assert client.stats()["users"] == [{"uid": os.getuid(), "user": "root", "bytes": 400,
                                            "tensors": 1, "quota_bytes": 0, "quota_tensors": 0}]


def test_cli_put_readers_stat_and_stats_json(fresh_daemon, tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, np.arange(25, dtype=np.float64))  # 200 bytes
    done = cli(fresh_daemon, "put", "cli/x", str(path), "--readers", "uid:0,group:root")
    assert done.returncode == 0, done.stderr
    done = cli(fresh_daemon, "stat", "cli/x", "--json")
    assert done.returncode == 0, done.stderr
    stat = json.loads(done.stdout)
    assert (stat["owner_uid"], stat["readers"]) == (os.getuid(), ["uid:0", "gid:0"])

    done = cli(fresh_daemon, "put", "cli/y", str(path), "--readers", "")
    assert done.returncode == 2 and "--readers" in done.stderr, done.stderr
    done = cli(fresh_daemon, "put", "cli/y", str(path), "--readers", "uid:0,nobody-like")
    assert done.returncode == 1 and "INVALID_ARGUMENT" in done.stderr, done.stderr
    assert "readers[1]" in done.stderr, done.stderr

    done = cli(fresh_daemon, "stats", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["users"] == [{"uid": 0, "user": "root", "bytes": 200,
                                                 "tensors": 1, "quota_bytes": 0,
                                                 "quota_tensors": 0}]
    done = cli(fresh_daemon, "stats", "--prometheus")
    assert done.returncode == 0, done.stderr
    assert 'tensorbroker_user_bytes{uid="0",user="root"} 200\n' in done.stdout
    assert 'tensorbroker_user_tensors{uid="0",user="root"} 1\n' in done.stdout


def test_metrics_over_http_show_each_users_bytes(tmp_path):
    log_path = tmp_path / "daemon.log"
    with open(log_path, "wb") as log:
        # The address is logged at info; the fixture's --log-level warning is overridden.
        daemon = Daemon("--metrics-listen", "127.0.0.1:0", "--log-level", "info", stderr=log)
    try:
        match = re.search(r"metrics at (http://127\.0\.0\.1:\d+/metrics)", log_path.read_text())
        assert match, log_path.read_text()
        with tensorbroker.connect(daemon.socket) as client:
            client.put("http/a", np.zeros(8, np.int64))  # 64 bytes
        with urllib.request.urlopen(match.group(1), timeout=HANG_GUARD) as reply:
            text = reply.read().decode()
        assert 'tensorbroker_user_bytes{uid="0",user="root"} 64\n' in text
        assert 'tensorbroker_user_tensors{uid="0",user="root"} 1\n' in text
    finally:
        assert daemon.stop() == 0


# ---- quotas ---------------------------------------------------------------------------------


def test_quota_tensors_refuses_the_third_put():
    daemon = Daemon("--quota-tensors", "2")
    try:
        with tensorbroker.connect(daemon.socket) as client:
            client.put("quota/a", np.zeros(1, np.float32))
            client.put("quota/b", np.zeros(1, np.float32))
            with pytest.raises(tensorbroker.ResourceExhausted) as error:
                client.put("quota/c", np.zeros(1, np.float32))
            message = str(error.value)
            assert "quota-tensors" in message and "quota/c" in message, message
            assert error.value.code == "RESOURCE_EXHAUSTED"
            with pytest.raises(tensorbroker.ResourceExhausted, match="quota-tensors"):
                client.create("quota/c", 1, "float32")
            with pytest.raises(tensorbroker.NotFound):
                client.stat("quota/c")
            [user] = client.stats()["users"]
            assert (user["tensors"], user["quota_tensors"]) == (2, 2)
            client.delete("quota/a")  # room again
            client.put("quota/c", np.zeros(1, np.float32))
            assert sorted(t["name"] for t in client.list("quota/")) == ["quota/b", "quota/c"]
    finally:
        assert daemon.stop() == 0


def test_quota_bytes_refuses_what_does_not_fit():
    daemon = Daemon("--quota-bytes", "1M")
    try:
        with tensorbroker.connect(daemon.socket) as client:
            client.put("qb/half", np.zeros(1 << 19, np.uint8))
            with pytest.raises(tensorbroker.ResourceExhausted) as error:
                client.put("qb/more", np.zeros((1 << 19) + 1, np.uint8))
            assert "quota-bytes" in str(error.value), str(error.value)
            client.put("qb/rest", np.zeros(1 << 19, np.uint8))  # exactly the quota
            [user] = client.stats()["users"]
            assert (user["bytes"], user["quota_bytes"]) == (1 << 20, 1 << 20)
    finally:
        assert daemon.stop() == 0


# ---- another uid ----------------------------------------------------------------------------

# Runs as uid 65534 (conftest.AS_UID_65534) and reports on stdout as JSON.
OTHER_UID = AS_UID_65534 + r"""

client = tensorbroker.connect(sys.argv[1])
report = {"uid": os.getuid(), "euid": os.geteuid()}
report["get_private"] = outcome(lambda: client.get("ten/private", timeout=0) and None)
report["stat_private"] = outcome(lambda: client.stat("ten/private") and None)
report["delete_private"] = outcome(lambda: client.delete("ten/private"))
report["replace_private"] = outcome(
    lambda: client.put("ten/private", np.zeros(1, np.float32), replace=True) and None)
report["list"] = [t["name"] for t in client.list()]
report["list_private"] = [t["name"] for t in client.list("ten/private")]
report["get_public"] = outcome(
    lambda: np.asarray(client.get("ten/public", timeout=0)).tolist())
report["delete_public"] = outcome(lambda: client.delete("ten/public"))
report["replace_public"] = outcome(
    lambda: client.put("ten/public", np.zeros(1, np.float32), replace=True) and None)
report["put_own"] = outcome(lambda: client.put("ten/nobodys", np.ones(3, np.int16))["owner_uid"])
stats = client.stats()
report["stats"] = {"tensors": stats["tensors"], "users": stats["users"]}
print(json.dumps(report))
"""


@ROOT_ONLY
def test_another_uid_sees_nothing_private_and_deletes_nothing(daemon, client):
    private = np.arange(10, dtype=np.float32) * np.float32(3)
    public = np.arange(5, dtype=np.float32)
    client.put("ten/private", private, readers=["uid:0"])
    client.put("ten/public", public)
    version = client.stat("ten/private")["version"]
    os.chmod(daemon.dir, 0o755)  # the child must reach the socket
    try:
        done = subprocess.run([sys.executable, "-c", OTHER_UID, daemon.socket],
                              capture_output=True, text=True, timeout=HANG_GUARD)
    finally:
        os.chmod(daemon.dir, 0o700)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["uid"], report["euid"]) == (65534, 65534)
    for call in ("get_private", "stat_private", "delete_private"):
        kind, message = report[call]
        assert kind == "NotFound", (call, report[call])
        assert "ten/private" in message, (call, message)
    # The name is taken (no one else may publish it), but whose it is is not told.
    kind, message = report["replace_private"]
    assert kind == "PermissionDenied" and "another user" in message, message
    assert "root" not in message and "uid 0" not in message, message
    assert report["list_private"] == []
    assert "ten/private" not in report["list"] and "ten/public" in report["list"]
    assert report["get_public"] == ["ok", public.tolist()]
    assert report["delete_public"][0] == "PermissionDenied", report["delete_public"]
    kind, message = report["replace_public"]
    assert kind == "PermissionDenied" and "belongs to uid 0 (root)" in message, message
    assert report["put_own"] == ["ok", 65534]
    assert report["stats"]["users"] == [{"uid": 65534, "user": "nobody", "bytes": 6,
                                         "tensors": 1, "quota_bytes": 0, "quota_tensors": 0}]
    assert report["stats"]["tensors"] == len(report["list"]) + 1  # + its own, listed before

    # Root's tensors are whole and unchanged; the daemon serves on.
    np.testing.assert_array_equal(np.asarray(client.get("ten/private", timeout=0)), private)
    np.testing.assert_array_equal(np.asarray(client.get("ten/public", timeout=0)), public)
    stat = client.stat("ten/private")
    assert (stat["owner_uid"], stat["readers"], stat["version"]) == (0, ["uid:0"], version)
    assert client.stat("ten/nobodys")["owner_uid"] == 65534
    client.delete("ten/nobodys")  # an administrator may
    client.ping()
