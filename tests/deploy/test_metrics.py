"""`tensorbroker stats --prometheus` against a real daemon, parsed with Prometheus's own text
parser (Debian's python3-prometheus-client), checked against what the test did: per-device
pool gauges, tensors, leases, clients, calls by method and code, and the latency histograms."""

import os
import signal
import subprocess
import tempfile
import time

import numpy as np
import pytest

prometheus_parser = pytest.importorskip("prometheus_client.parser")

DAEMON = os.environ.get("TENSORBROKERD", "")
CLI = os.environ.get("TENSORBROKER_CLI", "")
pytestmark = pytest.mark.skipif(not (DAEMON and CLI), reason="set TENSORBROKERD and TENSORBROKER_CLI")
HANG_GUARD = 60


@pytest.fixture
def broker():
    with tempfile.TemporaryDirectory(prefix="tbmetrics.") as d:
        sock = os.path.join(d, "b.sock")
        daemon = subprocess.Popen([DAEMON, "--socket", sock, "--capacity", "128M",
                                   "--cuda-capacity", "0", "--log-level", "warning"])
        deadline = time.monotonic() + 30
        while not os.path.exists(sock):
            assert daemon.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        yield d, sock
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=HANG_GUARD) == 0


def cli(sock, *args):
    done = subprocess.run([CLI, "--socket", sock, *args], capture_output=True, text=True,
                          timeout=HANG_GUARD)
    return done


def samples(text):
    """{(name, frozenset(labels)): value} for every sample."""
    out = {}
    for family in prometheus_parser.text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def test_metrics_match_the_daemons_state(broker):
    workdir, sock = broker
    path = os.path.join(workdir, "x.npy")
    np.save(path, np.arange(1000, dtype=np.float64))  # 8000 bytes
    for name in ("m/a", "m/b", "m/c"):
        assert cli(sock, "put", name, path).returncode == 0
    assert cli(sock, "rm", "m/c").returncode == 0
    for _ in range(2):
        assert cli(sock, "stat", "m/missing").returncode == 1  # NOT_FOUND twice
    done = cli(sock, "stats", "--prometheus")
    assert done.returncode == 0, done.stderr
    got = samples(done.stdout)
    stats = __import__("json").loads(cli(sock, "stats", "--json").stdout)

    def value(name, **labels):
        return got[(name, frozenset(labels.items()))]

    assert value("tensorbroker_capacity_bytes", device="cpu") == 128 << 20
    assert value("tensorbroker_used_bytes", device="cpu") == stats["used_bytes"] > 0
    assert value("tensorbroker_reserved_bytes", device="cpu") == stats["reserved_bytes"]
    assert value("tensorbroker_segments", device="cpu") == stats["segments"]
    assert value("tensorbroker_tensors") == 2
    assert value("tensorbroker_leases") == 0
    assert value("tensorbroker_pending_tensors") == 0
    assert value("tensorbroker_clients") == 1  # the `stats` call's own session
    # Counters: what this test did (each CLI run is its own client; put = Create + Seal).
    assert value("tensorbroker_calls_total", method="Create", code="OK") == 3
    assert value("tensorbroker_calls_total", method="Seal", code="OK") == 3
    assert value("tensorbroker_calls_total", method="Delete", code="OK") == 1
    assert value("tensorbroker_calls_total", method="Stat", code="NOT_FOUND") == 2
    assert ("tensorbroker_calls_total", frozenset({"method": "Stat", "code": "OK"}.items())) \
        not in got
    # Histograms: cumulative buckets ending in +Inf == _count == the calls of that method.
    for method, calls in (("Create", 3), ("Seal", 3), ("Stat", 2), ("Delete", 1)):
        assert value("tensorbroker_call_duration_seconds_count", method=method) == calls
        assert value("tensorbroker_call_duration_seconds_bucket", method=method, le="+Inf") == calls
        assert value("tensorbroker_call_duration_seconds_sum", method=method) > 0
        buckets = sorted((float(dict(labels)["le"]), v) for (name, labels), v in got.items()
                         if name == "tensorbroker_call_duration_seconds_bucket"
                         and dict(labels)["method"] == method)
        counts = [v for _, v in buckets]
        assert counts == sorted(counts)  # cumulative
    # The Session stream is counted, never timed.
    assert ("tensorbroker_call_duration_seconds_count",
            frozenset({"method": "Session"}.items())) not in got
    assert value("tensorbroker_calls_total", method="Session", code="OK") >= 6


def test_prometheus_and_json_exclude_each_other(broker):
    _, sock = broker
    done = cli(sock, "stats", "--json", "--prometheus")
    assert done.returncode == 2
    assert "--json and --prometheus exclude each other" in done.stderr
