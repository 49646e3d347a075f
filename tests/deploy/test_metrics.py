"""`tensorbroker stats --prometheus` against a real daemon, parsed with Prometheus's own text
parser (Debian's python3-prometheus-client), checked against what the test did: per-device
pool gauges, tensors, leases, clients, calls by method and code, and the latency histograms."""

import contextlib
import os
import re
import signal
import socket
import subprocess
import tempfile
import sys
import threading
import time
import urllib.parse

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from daemon_wait import (  # noqa: E402  (tests/python/daemon_wait.py)
    describe_exit, log_line, quote_log, wait_for)

prometheus_parser = pytest.importorskip("prometheus_client.parser")

DAEMON = os.environ.get("TENSORBROKERD", "")
CLI = os.environ.get("TENSORBROKER_CLI", "")
pytestmark = pytest.mark.skipif(not (DAEMON and CLI), reason="set TENSORBROKERD and TENSORBROKER_CLI")
HANG_GUARD = 60


@contextlib.contextmanager
def stopped_at_the_end(daemon, log_path):
    """Stops `daemon` when the block ends: SIGTERM and exit status 0 expected (its log quoted
    otherwise), or SIGKILL when the block failed."""
    try:
        yield
    except BaseException:
        if daemon.poll() is None:
            daemon.kill()
        daemon.wait()
        raise
    daemon.send_signal(signal.SIGTERM)
    code = daemon.wait(timeout=HANG_GUARD)
    assert code == 0, f"tensorbrokerd: {describe_exit(code)}; its log:\n{quote_log(log_path)}"


@contextlib.contextmanager
def running_daemon(prefix, *options):
    """A daemon on b.sock in a new temporary directory (128M, no CUDA, then `options`), its
    stderr in daemon.log there, stopped at the end: (workdir, socket, log path, process)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as d:
        sock = os.path.join(d, "b.sock")
        log_path = os.path.join(d, "daemon.log")
        with open(log_path, "wb") as log:
            daemon = subprocess.Popen([DAEMON, "--socket", sock, "--capacity", "128M",
                                       "--cuda-capacity", "0", *options], stderr=log)
        with stopped_at_the_end(daemon, log_path):
            yield d, sock, log_path, daemon


@pytest.fixture
def broker():
    with running_daemon("tbmetrics.", "--log-level", "warning") as (d, sock, log_path, daemon):
        wait_for(daemon, f"serving on {sock}", lambda: os.path.exists(sock), log_path)
        yield d, sock


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
    assert value("tensorbroker_pool_info", device="cpu", handles="memfd") == 1
    assert value("tensorbroker_used_bytes", device="cpu") == stats["used_bytes"] > 0
    assert value("tensorbroker_reserved_bytes", device="cpu") == stats["reserved_bytes"]
    assert value("tensorbroker_segments", device="cpu") == stats["segments"]
    assert value("tensorbroker_tensors") == 2
    assert value("tensorbroker_leases") == 0
    assert value("tensorbroker_pending_tensors") == 0
    assert value("tensorbroker_waiting_gets") == stats["waiting_gets"] == 0
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


# ---- --metrics-listen: the same text served over HTTP ------------------------------------------

@contextlib.contextmanager
def serving_http():
    """A daemon serving /metrics on a free loopback port: (workdir, socket, base URL, process)."""
    with running_daemon("tbhttp.", "--metrics-listen", "127.0.0.1:0") as started:
        d, sock, log_path, daemon = started
        line = wait_for(daemon, f"serving on {sock} and /metrics",
                        lambda: os.path.exists(sock) and
                        log_line(log_path, "<6>metrics at http://127.0.0.1:"), log_path)
        url = line[len("<6>metrics at "):].strip()[:-len("/metrics")]
        yield d, sock, url, daemon


@pytest.fixture
def http_broker():
    """A daemon serving /metrics on a free loopback port; yields (workdir, socket, base URL)."""
    with serving_http() as (d, sock, url, _):
        yield d, sock, url


def http(url, method="GET", raw=None, timeout=HANG_GUARD):
    """(status line, headers dict, body) of one request, read until the server closes."""
    import socket as socketlib
    import urllib.parse
    parts = urllib.parse.urlsplit(url)
    request = raw if raw is not None else \
        f"{method} {parts.path or '/'} HTTP/1.1\r\nHost: {parts.netloc}\r\n\r\n".encode()
    with socketlib.create_connection((parts.hostname, parts.port), timeout=timeout) as s:
        s.sendall(request)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return lines[0], headers, body


def test_http_metrics_are_the_daemons_state(http_broker):
    workdir, sock, url = http_broker
    path = os.path.join(workdir, "x.npy")
    np.save(path, np.arange(1000, dtype=np.float64))
    for name in ("h/a", "h/b"):
        assert cli(sock, "put", name, path).returncode == 0
    status, headers, body = http(url + "/metrics")
    assert status == "HTTP/1.1 200 OK"
    assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert int(headers["Content-Length"]) == len(body)
    got = samples(body.decode())
    stats = __import__("json").loads(cli(sock, "stats", "--json").stdout)
    assert got[("tensorbroker_capacity_bytes", frozenset({"device": "cpu"}.items()))] == 128 << 20
    assert got[("tensorbroker_used_bytes", frozenset({"device": "cpu"}.items()))] == \
        stats["used_bytes"] > 0
    assert got[("tensorbroker_tensors", frozenset())] == 2
    assert got[("tensorbroker_calls_total",
                frozenset({"method": "Create", "code": "OK"}.items()))] == 2
    # The same families as `stats --prometheus` (its numbers move: that call is counted).
    text = cli(sock, "stats", "--prometheus").stdout
    assert sorted({n for n, _ in samples(text)}) == sorted({n for n, _ in got})


def test_http_answers_every_request_and_keeps_serving(http_broker):
    _, sock, url = http_broker
    status, headers, body = http(url + "/metrics", method="HEAD")
    assert status == "HTTP/1.1 200 OK" and body == b"" and int(headers["Content-Length"]) > 0
    assert http(url + "/metrics?x=1")[0] == "HTTP/1.1 200 OK"
    assert http(url + "/")[0] == "HTTP/1.1 200 OK"
    assert http(url + "/nope")[0] == "HTTP/1.1 404 Not Found"
    status, headers, _ = http(url + "/metrics", method="POST")
    assert status == "HTTP/1.1 405 Method Not Allowed" and headers["Allow"] == "GET, HEAD"
    assert http(url, raw=b"garbage\r\n\r\n")[0] == "HTTP/1.1 400 Bad Request"
    assert http(url, raw=b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 10000)[0] == \
        "HTTP/1.1 431 Request Header Fields Too Large"
    # A client that connects and says nothing holds up neither a scrape nor gRPC.
    import socket as socketlib
    import urllib.parse
    parts = urllib.parse.urlsplit(url)
    with socketlib.create_connection((parts.hostname, parts.port)):
        assert cli(sock, "health").returncode == 0  # gRPC is never behind the HTTP loop
        assert http(url + "/metrics")[0] == "HTTP/1.1 200 OK"


def test_a_client_that_trickles_bytes_is_cut_off_and_scrapes_go_on(http_broker):
    """The 2 s limit is per connection, not per read: one byte every 0.25 s for up to 10 s is
    cut off, and a scrape beside it is answered meanwhile."""
    import socket as socketlib
    import threading
    import urllib.parse
    _, _, url = http_broker
    parts = urllib.parse.urlsplit(url)
    cut_off = threading.Event()

    def trickle():
        with socketlib.create_connection((parts.hostname, parts.port)) as s:
            try:
                for byte in b"GET /metrics HTTP/1.1\r\nX-Slow: " + b"a" * 40:
                    s.sendall(bytes([byte]))
                    time.sleep(0.25)
            except OSError:  # reset: the daemon closed it while we were still sending
                cut_off.set()

    slow = threading.Thread(target=trickle)
    slow.start()
    time.sleep(0.3)
    assert http(url + "/metrics")[0] == "HTTP/1.1 200 OK"
    slow.join(timeout=HANG_GUARD)
    assert cut_off.is_set()


def test_metrics_listen_errors_stop_the_start(http_broker):
    _, _, url = http_broker
    busy = url[len("http://"):]
    with tempfile.TemporaryDirectory(prefix="tbhttp2.") as d:
        done = subprocess.run([DAEMON, "--socket", os.path.join(d, "s.sock"), "--cuda-capacity",
                               "0", "--metrics-listen", busy], capture_output=True, text=True,
                              timeout=HANG_GUARD)
        assert done.returncode == 1
        assert f"--metrics-listen: cannot listen on {busy}: Address already in use" in done.stderr
        assert not os.path.exists(os.path.join(d, "s.sock"))
    for bad, why in (("9464", "needs HOST:PORT"), ("::1:9464", "goes in brackets"),
                     ("[::1]9464", "[ADDRESS]:PORT"), ("127.0.0.1:http", "not a number"),
                     ("localhost:9464", "not an IPv4 address"),
                     ("[127.0.0.1]:9464", "not an IPv6 address")):
        done = subprocess.run([DAEMON, "--metrics-listen", bad, "--print-config"],
                              capture_output=True, text=True, timeout=HANG_GUARD)
        assert done.returncode == 2, bad
        assert f"--metrics-listen '{bad}': " in done.stderr and why in done.stderr, done.stderr


# ---- hostile clients: made-up method names -------------------------------------------------------

def api_method_labels():
    """Every method label the daemon may report: tensorbroker.v1.Broker's methods (read from
    broker.proto), the health service's (full names) and the local channel's calls."""
    proto = os.path.join(os.path.dirname(__file__), "..", "..", "proto", "tensorbroker", "v1",
                         "broker.proto")
    with open(proto) as f:
        broker = set(re.findall(r"^\s*rpc (\w+)\(", f.read(), re.M))
    assert {"Session", "Create", "Stats", "Ping"} <= broker
    health = {"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch"}
    local = {"Open", "Attach", "Get", "Create", "Seal", "Abort", "Retain", "FetchSegment",
             "Release", "OpenFastReads"}
    return broker | health | local


def test_made_up_method_names_are_counted_under_one_label(http_broker):
    """3,000 calls to names the API does not have (other services, and made-up methods of the
    Broker and Health services) make one `unknown` series, not 3,000; Stats stays small, so
    `stats` and `health` keep working."""
    grpc = pytest.importorskip("grpc")
    _, sock, url = http_broker
    made_up = ([f"/x.Y/M{i}" for i in range(2000)] +
               [f"/tensorbroker.v1.Broker/Made{i}" for i in range(500)] +
               [f"/grpc.health.v1.Health/Made{i}" for i in range(500)])
    with grpc.insecure_channel("unix:" + sock) as channel:
        for path in made_up:
            with pytest.raises(grpc.RpcError) as refused:
                channel.unary_unary(path)(b"", timeout=HANG_GUARD)
            assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED, path

    health = cli(sock, "health")
    assert health.returncode == 0 and health.stdout.strip() == "SERVING", health
    for args in (("stats",), ("stats", "--json")):
        done = cli(sock, *args)
        assert done.returncode == 0, (args, done.stderr)
    done = cli(sock, "stats", "--prometheus")
    assert done.returncode == 0, done.stderr
    status, _, body = http(url + "/metrics")
    assert status == "HTTP/1.1 200 OK"
    known = api_method_labels()
    for text in (done.stdout, body.decode()):
        got = samples(text)
        methods = {dict(labels)["method"] for name, labels in got
                   if name.startswith("tensorbroker_call")}
        assert "unknown" in methods and methods - {"unknown"} <= known, methods - known
        unknown = {dict(labels)["code"]: value for (name, labels), value in got.items()
                   if name == "tensorbroker_calls_total" and dict(labels)["method"] == "unknown"}
        assert unknown == {"UNIMPLEMENTED": 3000}
        # Counted, not timed: a made-up call's duration says nothing about the daemon.
        assert ("tensorbroker_call_duration_seconds_count",
                frozenset({"method": "unknown"}.items())) not in got
        assert got[("tensorbroker_calls_total", frozenset(
            {"method": "/grpc.health.v1.Health/Check", "code": "OK"}.items()))] == 1


# ---- hostile clients: slow scrapers ----------------------------------------------------------------

# Prometheus's default scrape_timeout: a scrape that takes longer is a failed scrape. Not a
# measurement (a scrape takes milliseconds): the old server, one connection at a time with 2 s
# each, answered a scrape behind 6 slow clients after 8-11 s.
PROMETHEUS_SCRAPE_TIMEOUT = 10


@pytest.fixture
def http_broker_pid():
    """Like http_broker; yields (socket, base URL, daemon pid)."""
    with serving_http() as (_, sock, url, daemon):
        yield sock, url, daemon.pid


def resources(pid):
    """(open descriptors, threads) of process `pid`."""
    return len(os.listdir(f"/proc/{pid}/fd")), len(os.listdir(f"/proc/{pid}/task"))


def settled_resources(pid, wait=HANG_GUARD):
    """resources(pid) once two readings 0.2 s apart agree (threads start lazily); `wait` is a
    hang guard, not a measurement."""
    deadline = time.monotonic() + wait
    last = resources(pid)
    while time.monotonic() < deadline:
        time.sleep(0.2)
        now = resources(pid)
        if now == last:
            return now
        last = now
    return last


def back_to(pid, baseline, wait=HANG_GUARD):
    """resources(pid), polled for up to `wait` seconds (a hang guard) until they are back to
    `baseline`: the same threads, and no descriptor more. Fewer is no leak: a baseline can hold
    descriptors of an earlier test's clients that the daemon had not closed yet (three, once,
    under TSan)."""
    deadline = time.monotonic() + wait
    while not within(now := resources(pid), baseline) and time.monotonic() < deadline:
        time.sleep(0.1)
    return now


def within(now, baseline):
    return now[0] <= baseline[0] and now[1] == baseline[1]


def scrape(url):
    """A scrape as Prometheus makes one; prints how long it took."""
    started = time.monotonic()
    status, headers, body = http(url + "/metrics", timeout=PROMETHEUS_SCRAPE_TIMEOUT)
    print(f"scrape: {status} {len(body)} bytes in {(time.monotonic() - started) * 1000:.1f} ms")
    return status, body


def connect(url, rcvbuf=None):
    parts = urllib.parse.urlsplit(url)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(HANG_GUARD)
    s.connect((parts.hostname, parts.port))
    return s


def test_slow_clients_do_not_hold_up_a_scrape(http_broker_pid):
    """Clients that connect and say nothing, send half a request, trickle one byte at a time
    or never read their answer are served side by side with a scrape, which gets its full
    answer at once; then the daemon's descriptors and threads are what they were."""
    _, url, pid = http_broker_pid
    assert scrape(url)[0] == "HTTP/1.1 200 OK"
    baseline = settled_resources(pid)
    request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
    stop = threading.Event()

    def trickle(s):
        try:
            for byte in request[:-2]:  # never the final blank line
                if stop.wait(0.1):
                    return
                s.sendall(bytes([byte]))
        except OSError:  # the daemon cut it off
            pass

    silent = [connect(url) for _ in range(3)]
    partial = [connect(url) for _ in range(3)]
    for s in partial:
        s.sendall(request[:20])
    trickling = [connect(url) for _ in range(3)]
    threads = [threading.Thread(target=trickle, args=(s,)) for s in trickling]
    for t in threads:
        t.start()
    # Ask for the answer and never read it, through a small receive buffer.
    not_reading = [connect(url, rcvbuf=1024) for _ in range(3)]
    for s in not_reading:
        s.sendall(request)
    slow = silent + partial + trickling + not_reading
    try:
        for _ in range(3):
            status, body = scrape(url)
            assert status == "HTTP/1.1 200 OK"
            assert b'tensorbroker_capacity_bytes{device="cpu"} 134217728\n' in body
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=HANG_GUARD)
        for s in slow:
            s.close()
    now = back_to(pid, baseline)
    assert within(now, baseline), (now, baseline)


def test_over_64_connections_the_oldest_are_closed(http_broker_pid):
    """At most 64 connections are open: each new one past that closes the oldest, so a flood of
    idle connections costs the daemon 64 descriptors and never shuts a scraper out."""
    _, url, pid = http_broker_pid
    assert scrape(url)[0] == "HTTP/1.1 200 OK"
    baseline = settled_resources(pid)
    idle = [connect(url) for _ in range(100)]
    try:
        status, body = scrape(url)  # accepted after the 100: the oldest made room for it
        assert status == "HTTP/1.1 200 OK"
        assert b'tensorbroker_capacity_bytes{device="cpu"} 134217728\n' in body
        descriptors, threads = resources(pid)
        assert descriptors - baseline[0] <= 64 and threads == baseline[1]
        for s in idle[:37]:  # 36 made room for the other idle ones, 1 for the scrape
            assert s.recv(1) == b""
    finally:
        for s in idle:
            s.close()
    now = back_to(pid, baseline)
    assert within(now, baseline), (now, baseline)
