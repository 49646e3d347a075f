#!/usr/bin/python3
"""How long a /metrics scrape takes while slow clients hold connections to the same daemon.

Starts `tensorbrokerd --metrics-listen 127.0.0.1:0` on a temporary socket, opens SLOW clients
of each kind (connected and silent; half a request; a byte every 100 ms; the whole request and
never reading the answer), then times SCRAPES scrapes one after another (well within the 2 s the
daemon gives each slow client) and prints the percentiles. Figures only, no pass/fail (tests/deploy/test_metrics.py checks the outcome).

  bench/metrics_scrape.py [--daemon build/daemon/tensorbrokerd] [--slow 6] [--scrapes 200]
"""

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "python"))
from daemon_wait import log_line, wait_for  # noqa: E402  (tests/python/daemon_wait.py)

REQUEST = b"GET /metrics HTTP/1.1\r\nHost: bench\r\n\r\n"


def start(daemon, workdir):
    sock = os.path.join(workdir, "b.sock")
    log_path = os.path.join(workdir, "daemon.log")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([daemon, "--socket", sock, "--cuda-capacity", "0",
                                 "--metrics-listen", "127.0.0.1:0"], stderr=log)
    try:
        line = wait_for(proc, "serving /metrics", lambda: log_line(log_path, "metrics at http://"),
                        log_path)
    except AssertionError as e:
        if proc.poll() is None:
            proc.kill()
        raise SystemExit(str(e))
    host, port = line.split("http://")[1].split("/")[0].rsplit(":", 1)
    return proc, (host, int(port))


def scrape(address):
    started = time.perf_counter()
    with socket.create_connection(address, timeout=30) as s:
        s.sendall(REQUEST)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    elapsed = time.perf_counter() - started
    if not data.startswith(b"HTTP/1.1 200 OK\r\n"):
        raise SystemExit(f"scrape answered {data[:40]!r}")
    return elapsed


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--daemon", default=os.path.join(here, "..", "build", "daemon",
                                                         "tensorbrokerd"))
    parser.add_argument("--slow", type=int, default=6, help="slow clients of each kind")
    parser.add_argument("--scrapes", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tbscrape.") as workdir:
        proc, address = start(args.daemon, workdir)
        stop = threading.Event()
        slow = []

        def trickle(s):
            try:
                for byte in REQUEST[:-2]:
                    if stop.wait(0.1):
                        return
                    s.sendall(bytes([byte]))
            except OSError:  # cut off by the daemon
                pass

        def open_slow():
            """One slow client of each kind (the daemon closes each after 2 s)."""
            for kind in ("silent", "partial", "trickle", "not reading"):
                s = socket.socket()
                if kind == "not reading":
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
                s.connect(address)
                if kind == "partial":
                    s.sendall(REQUEST[:20])
                elif kind == "not reading":
                    s.sendall(REQUEST)
                elif kind == "trickle":
                    threading.Thread(target=trickle, args=(s,), daemon=True).start()
                slow.append(s)

        try:
            idle = sorted(scrape(address) for _ in range(args.scrapes))
            for _ in range(args.slow):
                open_slow()
            times = sorted(scrape(address) for _ in range(args.scrapes))
        finally:
            stop.set()
            for s in slow:
                s.close()
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)

    def line(label, values):
        pick = lambda q: values[min(len(values) - 1, int(q * len(values)))] * 1000
        print(f"{label:<44} p50 {pick(0.5):7.2f} ms  p99 {pick(0.99):7.2f} ms  "
              f"max {values[-1] * 1000:7.2f} ms")

    print(f"/metrics scrapes ({args.scrapes} each), daemon {os.path.realpath(args.daemon)}")
    line("no other client", idle)
    line(f"beside {4 * args.slow} slow clients ({args.slow} of each kind)", times)


if __name__ == "__main__":
    main()
