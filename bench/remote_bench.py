#!/usr/bin/python3
"""Across nodes (issue 33, point 7): what a Get of another broker's tensor costs; figures only.

Side by side in one run, for each size (4 KiB, 64 MiB, 1 GiB), on this machine over 127.0.0.1:

  first Get     two tensorbrokerd, A and B, each with its own socket directory and capacity; A
                serves peers (--peer-listen 127.0.0.1:0, mutual TLS with certificates the bench
                makes with tests/support/make_test_pki.sh), B has remote[shared/] = A. A uint8
                tensor of stamped bytes is created on A (readers peer:broker-b); on B the FIRST
                Get of its name is timed: B fetches it from A (a gRPC Read stream over TLS) into
                a local replica and answers. The bytes are checked (untimed) and released. A
                fresh name each round; the daemons' CPU time (user + system, /proc/PID/stat,
                10 ms ticks) over each first Get says where the time goes.
  cached Get    the SECOND and later Gets of the replica on B (--gets of them, after 20 untimed):
                p50 / p99 of get(); and the same on A of the original, a local Get, in turns
                with B's (one on B, one on A, ...) so that both see the same machine.
  TLS floor     the same bytes over ONE TLS 1.3 connection between the same endpoints with the
                same certificates (bench/tls_floor.cc, tensorbroker_tls_floor: AES-256-GCM, a
                forked server writes, the client reads into a pre-faulted buffer); the same into
                a fresh memfd segment each time (--fresh: its pages fault in as the bytes come,
                as a replica's do in daemon B); and over bare TCP (--plain): what TLS adds.
  gloo          what a user would write instead: torch.distributed send/recv, gloo backend, two
                processes (init_method tcp://127.0.0.1:PORT), warmed up with a small tensor; the
                receiver times each recv after a barrier and checks the bytes (untimed).

A tensor on A is deleted once fetched (the last round's after the cached Gets); B's replicas
cannot be deleted there (they are A's) and give way to the next ones for capacity. Then the
goals, "met" / "not met" for information only: the 1 GiB first Get at >= 50% of the TLS floor's
rate; the cached replica Get within 1.2x a local Get; the first Get faster than gloo at 64 MiB and
1 GiB. The exit code is 1 only for an error: wrong bytes, a failed call, a daemon that did not
start or did not exit 0 on SIGTERM. Both daemons are stopped and the temporary directory removed
whatever happens.

  PYTHONPATH=build/python /usr/bin/python3 bench/remote_bench.py [--daemon PATH]
      [--tls-floor PATH] [--sizes 4K,64M,1G] [--rounds 3] [--small-rounds 20] [--gets 200]
      [--no-gloo] [--daemon-env NAME=VALUE] [--json]
"""

import argparse
import datetime
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
from daemon_wait import log_line, wait_for  # noqa: E402  (tests/python/daemon_wait.py)

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
SMALL = 16 * MiB  # sizes below this take --small-rounds
PERIOD = MiB + 13  # the stamp repeats every PERIOD bytes: a chunk out of place shows
WARM_GETS = 20
WAIT = 600  # seconds: a transfer or child stuck this long is an error, not a figure
TICK = os.sysconf("SC_CLK_TCK")


def parse_size(text):
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    scale = {"K": KiB, "M": MiB, "G": GiB}.get(text[-1:], 1)
    value = int(float(text[:-1] if scale > 1 else text) * scale)
    if value < 1:
        raise argparse.ArgumentTypeError("sizes are at least 1 byte")
    return value


def size_label(n):
    for unit, name in ((GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB")):
        if n >= unit and n % unit == 0:
            return f"{n // unit} {name}"
    return f"{n} B"


def fmt_s(s):
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.1f} us"
    if s < 1:
        ms = s * 1e3
        return f"{ms:.{2 if ms < 10 else 1 if ms < 100 else 0}f} ms"
    return f"{s:.2f} s"


def rate(size, seconds):
    return size / seconds / GiB if seconds else None


def pct(samples, q):
    """The q-quantile (nearest rank) of `samples`, or None."""
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))] if s else None


def rounds_for(args, size):
    return args.small_rounds if size < SMALL else args.rounds


# ---- stamped bytes

def pattern(seed):
    return np.random.default_rng(seed).integers(0, 256, PERIOD, dtype=np.uint8)


def fill(view, pat):
    """Writes the stamp into the uint8 array `view`: pat repeated."""
    for at in range(0, view.size, PERIOD):
        n = min(PERIOD, view.size - at)
        view[at:at + n] = pat[:n]


def same(view, pat):
    """Whether the uint8 array `view` holds the stamp; compared a period at a time."""
    for at in range(0, view.size, PERIOD):
        n = min(PERIOD, view.size - at)
        if not np.array_equal(view[at:at + n], pat[:n]):
            return False
    return True


# ---- the daemons

class Daemon:
    """A tensorbrokerd of the bench's, on its own socket directory, its stderr in a log file."""

    def __init__(self, binary, workdir, name, flags, env=None):
        self.name = name
        self.dir = os.path.join(workdir, name)
        os.makedirs(self.dir)
        self.socket = os.path.join(self.dir, "broker.sock")
        self.log_path = os.path.join(self.dir, "daemon.log")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen([binary, "--socket", self.socket, "--cuda-capacity", "0"]
                                         + flags, stderr=log, stdout=subprocess.DEVNULL,
                                         env=dict(os.environ, **(env or {})))

    def wait(self, what, reached):
        """Until reached() answers (daemon_wait.wait_for); SIGKILLed if it never does."""
        try:
            return wait_for(self.proc, what, reached, self.log_path)
        except BaseException:
            self.proc.kill()
            self.proc.wait()
            raise

    def cpu(self):
        """(user, system) CPU seconds so far, from /proc/PID/stat (10 ms ticks)."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) / TICK, int(fields[12]) / TICK

    def stop(self):
        """SIGTERM and wait; an error message unless it exited 0."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return f"daemon {self.name} did not exit within 60 s of SIGTERM (killed)"
        if self.proc.returncode != 0:
            return f"daemon {self.name} exited with {self.proc.returncode} (log: {self.log_path})"
        return None


def answers(socket):
    """Whether a daemon answers on `socket` (tensorbroker.connect succeeds)."""
    import tensorbroker

    try:
        tensorbroker.connect(socket, timeout=1).close()
        return True
    except tensorbroker.Unavailable:
        return False


def start_pair(args, workdir, pki, daemons):
    """Daemon A serving peers, then daemon B with remote[shared/] = A, each appended to
    `daemons` as soon as it runs (the caller stops them). Returns (a, b)."""
    largest = max(args.sizes)
    capacity = str(2 * largest + 64 * MiB)  # one tensor at a time, and room to spare
    tls = ["--tls-cert", f"{pki}/broker-a.crt", "--tls-key", f"{pki}/broker-a.key",
           "--tls-ca", f"{pki}/ca.crt"]
    env = dict(item.split("=", 1) for item in args.daemon_env)
    a = Daemon(args.daemon, workdir, "a",
               ["--capacity", capacity, "--peer-listen", "127.0.0.1:0"] + tls, env)
    daemons.append(a)
    line = a.wait("serving peers", lambda: log_line(a.log_path, "peers: serving on 127.0.0.1:"))
    port = int(line.split("127.0.0.1:")[1].split()[0])
    config = os.path.join(workdir, "b.conf")
    with open(config, "w") as f:
        f.write(f"remote[shared/] = 127.0.0.1:{port}\n"
                f"tls-cert = {pki}/broker-b.crt\ntls-key = {pki}/broker-b.key\n"
                f"tls-ca = {pki}/ca.crt\n")
    b = Daemon(args.daemon, workdir, "b", ["--capacity", capacity, "--config", config], env)
    daemons.append(b)
    for d in (a, b):
        d.wait(f"serving on {d.socket}", lambda d=d: answers(d.socket))
    return a, b


# ---- the broker: first Get, cached Get, local Get

def put_on_a(client, name, size, pat):
    """A uint8 tensor of `size` stamped bytes on A, readable by broker-b, filled in place."""
    with client.create(name, (size,), "uint8", readers=["peer:broker-b"]) as t:
        fill(np.asarray(t), pat)
        t.seal()


def first_get(client_b, a, b, name, size, pat, errors):
    """Times B's first Get of `name` (the fetch); checks the bytes, untimed; releases."""
    a0, b0 = a.cpu(), b.cpu()
    start = time.perf_counter()
    t = client_b.get(name, timeout=WAIT)
    seconds = time.perf_counter() - start
    a1, b1 = a.cpu(), b.cpu()
    try:
        if t.nbytes != size or not same(np.asarray(t), pat):
            errors.append(f"{name}: the replica on B is not the bytes put on A")
        if client_b.stat(name).get("origin") is None:
            errors.append(f"{name}: B's tensor is not a replica (stat has no origin)")
    finally:
        t.release()
    return {"seconds": seconds, "b_cpu": [b1[0] - b0[0], b1[1] - b0[1]],
            "a_cpu": [a1[0] - a0[0], a1[1] - a0[1]]}


def time_gets(clients, name, n):
    """Seconds of `n` get() calls of `name` through each client, taken in turns (one Get on
    each, then the next), so that both lists see the same moments of the machine; each tensor
    released, untimed."""
    for _ in range(WARM_GETS):
        for client in clients:
            client.get(name).release()
    samples = [[] for _ in clients]
    for _ in range(n):
        for client, into in zip(clients, samples):
            start = time.perf_counter()
            t = client.get(name)
            into.append(time.perf_counter() - start)
            t.release()
    return samples


def broker_size(args, clients, a, b, size, errors):
    """One size: the first Gets (fresh names), then cached Gets on B and local Gets on A."""
    client_a, client_b = clients
    firsts, name = [], None
    for r in range(rounds_for(args, size)):
        if name is not None:
            client_a.delete(name)
        name = f"shared/bench-{size}-{r}"
        pat = pattern(size * 1000 + r)
        put_on_a(client_a, name, size, pat)
        firsts.append(first_get(client_b, a, b, name, size, pat, errors))
    cached, local = time_gets([client_b, client_a], name, args.gets)
    client_a.delete(name)
    return {"first": firsts, "cached_get_s": cached, "local_get_s": local}


def broker_phase(args, workdir, pki, errors):
    """The two daemons, every size; stops them (exit 0 expected). Returns ({size: figures},
    {"warm_up": the first Get that opened the peer channel, "b_stats": B's stats at the end})."""
    import tensorbroker

    daemons, clients = [], []
    results, extra = {}, {}
    try:
        a, b = start_pair(args, workdir, pki, daemons)
        clients = [tensorbroker.connect(a.socket), tensorbroker.connect(b.socket)]
        # The peer channel's connection and TLS handshake, outside the figures.
        pat = pattern(1)
        put_on_a(clients[0], "shared/warm-up", 4 * KiB, pat)
        extra["warm_up"] = first_get(clients[1], a, b, "shared/warm-up", 4 * KiB, pat, errors)
        clients[0].delete("shared/warm-up")
        for size in args.sizes:
            results[size] = broker_size(args, clients, a, b, size, errors)
            print(f"  broker: {size_label(size)} done", file=sys.stderr, flush=True)
        extra["b_stats"] = clients[1].stats()
    finally:
        for c in clients:
            c.close()
        for d in reversed(daemons):
            if message := d.stop():
                errors.append(message)
    return results, extra


# ---- the floor: one TLS connection (and bare TCP)

FLOORS = {"tls": [], "tls_fresh": ["--fresh"], "tcp": ["--plain"]}  # kind: tls_floor's flags


def floor_phase(args, pki, errors):
    """{size: {kind: [seconds...]}} for each kind of FLOORS, and the TLS version and cipher."""
    results, suite = {}, None
    for size in args.sizes:
        results[size] = {}
        for kind, flags in FLOORS.items():
            command = [args.tls_floor, "--pki", pki, "--sizes", str(size), "--rounds",
                       str(rounds_for(args, size)), "--json"] + flags
            run = subprocess.run(command, capture_output=True, text=True, timeout=WAIT)
            if run.returncode != 0:
                errors.append(f"{' '.join(command)}: exit {run.returncode}: {run.stderr.strip()}")
                continue
            answer = json.loads(run.stdout.strip().splitlines()[-1])
            results[size][kind] = answer["sizes"][0]["seconds"]
            if kind == "tls":
                suite = f"{answer['version']} {answer['cipher']}"
        print(f"  floor: {size_label(size)} done", file=sys.stderr, flush=True)
    return results, suite


# ---- gloo: torch.distributed send/recv between two processes

def gloo_child(args):
    """Rank 0 sends, rank 1 receives and prints {size: [seconds...]} as JSON (hidden mode)."""
    import torch
    import torch.distributed as dist

    rank = args.gloo_rank
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.gloo_port}",
                            rank=rank, world_size=2)
    warm = torch.zeros(4 * KiB, dtype=torch.uint8)
    for _ in range(5):
        dist.send(warm, 1) if rank == 0 else dist.recv(warm, 0)
    times, wrong = {}, []
    for size in args.sizes:
        pat = pattern(size * 1000 + 7)
        tensor = torch.zeros(size, dtype=torch.uint8)  # every page touched before the timing
        if rank == 0:
            fill(tensor.numpy(), pat)
        times[size] = []
        for _ in range(rounds_for(args, size)):
            dist.barrier()
            start = time.perf_counter()
            dist.send(tensor, 1) if rank == 0 else dist.recv(tensor, 0)
            times[size].append(time.perf_counter() - start)
            if rank == 1:
                if not same(tensor.numpy(), pat):
                    wrong.append(size)
                tensor.zero_()
        del tensor
    dist.barrier()
    dist.destroy_process_group()
    if rank == 1:
        print(json.dumps({"times": times, "wrong": wrong}), flush=True)


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gloo_phase(args, errors):
    """{size: [seconds...]} of the receiver, from two child processes of this script."""
    port = free_port()
    sizes = ",".join(str(s) for s in args.sizes)
    children = [subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--gloo-rank", str(rank), "--gloo-port",
         str(port), "--sizes", sizes, "--rounds", str(args.rounds), "--small-rounds",
         str(args.small_rounds)], stdout=subprocess.PIPE, text=True) for rank in (0, 1)]
    outputs = []
    try:
        for child in children:
            outputs.append(child.communicate(timeout=WAIT)[0])
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    if any(c.returncode != 0 for c in children):
        errors.append(f"gloo: children exited {[c.returncode for c in children]}")
        return {}
    answer = json.loads(outputs[1].strip().splitlines()[-1])
    for size in answer["wrong"]:
        errors.append(f"gloo: the {size_label(size)} tensor received is not the one sent")
    return {int(size): times for size, times in answer["times"].items()}


# ---- the report

def cell(seconds, size):
    """"2.10 s (0.48 GiB/s)" for the median of `seconds`, or "-"."""
    if not seconds:
        return "-"
    median = statistics.median(seconds)
    return f"{fmt_s(median)} ({rate(size, median):.3g} GiB/s)"


def cpu_cell(firsts, key):
    """Median user / system CPU time, in ms (the kernel counts it in 10 ms ticks)."""
    user = statistics.median(f[key][0] for f in firsts)
    system = statistics.median(f[key][1] for f in firsts)
    return f"{user * 1e3:.0f} / {system * 1e3:.0f} ms"


def rows_of(args, broker, floor, gloo):
    """(label, [cell per size]) for the table."""
    def per_size(make):
        return [make(size) for size in args.sizes]

    def firsts(size):
        return [f["seconds"] for f in broker[size]["first"]]

    def spread(key):
        return per_size(lambda s: f"{fmt_s(pct(broker[s][key], 0.5))} / "
                                  f"{fmt_s(pct(broker[s][key], 0.99))}")

    def cpu(key):
        return per_size(lambda s: cpu_cell(broker[s]["first"], key))

    return [
        ("first Get on B (the fetch), median", per_size(lambda s: cell(firsts(s), s))),
        ("  fastest .. slowest (rounds)", per_size(
            lambda s: f"{fmt_s(min(firsts(s)))} .. {fmt_s(max(firsts(s)))} ({len(firsts(s))})")),
        ("  daemon B CPU, user / system", cpu("b_cpu")),
        ("  daemon A CPU, user / system", cpu("a_cpu")),
        ("TLS floor: one connection, median", per_size(lambda s: cell(floor[s].get("tls"), s))),
        ("  into a fresh memfd segment", per_size(lambda s: cell(floor[s].get("tls_fresh"), s))),
        ("bare TCP, no TLS, median", per_size(lambda s: cell(floor[s].get("tcp"), s))),
        ("gloo send/recv, median", per_size(lambda s: cell(gloo.get(s), s))),
        ("cached replica Get on B, p50 / p99", spread("cached_get_s")),
        ("local Get on A, p50 / p99", spread("local_get_s")),
    ]


def goals_of(args, broker, floor, gloo):
    """[(goal, met, how)] for the goals the sizes measured."""
    def median_first(size):
        return statistics.median(f["seconds"] for f in broker[size]["first"])

    goals = []
    if GiB in args.sizes and floor[GiB].get("tls"):
        ours, base = rate(GiB, median_first(GiB)), rate(GiB, statistics.median(floor[GiB]["tls"]))
        how = f"{ours / base:.0%}: {ours:.3g} vs {base:.3g} GiB/s"
        # Round 1 writes into memory daemon B never had (each page's first touch); later rounds
        # into the segment the evicted replica before them left.
        first = broker[GiB]["first"][0]["seconds"]
        how += f"; round 1, into new memory: {fmt_s(first)}, {rate(GiB, first) / base:.0%}"
        if floor[GiB].get("tls_fresh"):
            fresh = rate(GiB, statistics.median(floor[GiB]["tls_fresh"]))
            how += f", {rate(GiB, first) / fresh:.0%} of the floor into a fresh segment"
        goals.append(("1 GiB first Get >= 50% of the TLS floor's rate", ours >= 0.5 * base, how))
    for size in args.sizes:
        cached = statistics.median(broker[size]["cached_get_s"])
        local = statistics.median(broker[size]["local_get_s"])
        goals.append((f"{size_label(size)} cached replica Get <= 1.2x a local Get",
                      cached <= 1.2 * local,
                      f"{cached / local:.2f}x: p50 {fmt_s(cached)} vs {fmt_s(local)}"))
    for size in (64 * MiB, GiB):
        if size in args.sizes and gloo.get(size):
            ours, theirs = median_first(size), statistics.median(gloo[size])
            goals.append((f"{size_label(size)} first Get faster than gloo", ours < theirs,
                          f"{theirs / ours:.2f}x as fast: {fmt_s(ours)} vs {fmt_s(theirs)}"))
    return goals


def print_report(args, header, broker, extra, floor, gloo, goals):
    print(header)
    rows = rows_of(args, broker, floor, gloo)
    width = 2 + max(len(c) for _, cells in rows for c in cells)
    print(f"{'':<37}" + "".join(f"{size_label(s):>{width}}" for s in args.sizes))
    for label, cells in rows:
        print(f"{label:<37}" + "".join(f"{c:>{width}}" for c in cells))
    warm = extra.get("warm_up")
    if warm:
        print(f"(the warm-up's first Get of 4 KiB, which opened B's TLS channel to A: "
              f"{fmt_s(warm['seconds'])})")
    stats = extra.get("b_stats")
    if stats:
        print(f"daemon B at the end: {stats['tensors']} replicas, {stats['used_bytes']} bytes "
              f"used, {stats['leases']} leases")
    print("\ngoals (information only):")
    for goal, met, how in goals:
        print(f"  {goal}: {'met' if met else 'not met'} ({how})")


def as_json(args, header, broker, extra, floor, gloo, goals, errors):
    sizes = {}
    for size in args.sizes:
        sizes[str(size)] = {"first_get": broker.get(size, {}).get("first"),
                            "cached_get_s": broker.get(size, {}).get("cached_get_s"),
                            "local_get_s": broker.get(size, {}).get("local_get_s"),
                            "tls_floor_s": floor.get(size, {}).get("tls"),
                            "tls_floor_fresh_s": floor.get(size, {}).get("tls_fresh"),
                            "tcp_floor_s": floor.get(size, {}).get("tcp"),
                            "gloo_s": gloo.get(size)}
    return json.dumps({"header": header, "sizes": sizes, "warm_up": extra.get("warm_up"),
                       "goals": [{"goal": g, "met": m, "how": h} for g, m, h in goals],
                       "errors": errors})


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--daemon", default=os.path.join(ROOT, "build", "daemon",
                                                         "tensorbrokerd"))
    parser.add_argument("--tls-floor", default=os.path.join(ROOT, "build", "bench",
                                                            "tensorbroker_tls_floor"))
    parser.add_argument("--sizes", default=[4 * KiB, 64 * MiB, GiB],
                        type=lambda s: [parse_size(x) for x in s.split(",")])
    parser.add_argument("--rounds", type=int, default=3,
                        help="first Gets (fresh names), floor and gloo transfers per size of "
                             "16 MiB and more")
    parser.add_argument("--small-rounds", type=int, default=20, help="the same, smaller sizes")
    parser.add_argument("--gets", type=int, default=200,
                        help="timed cached Gets on B and local Gets on A per size")
    parser.add_argument("--no-gloo", action="store_true", help="skip torch.distributed")
    parser.add_argument("--daemon-env", action="append", default=[], metavar="NAME=VALUE",
                        help="set in both daemons' environment (repeatable), e.g. "
                             "GLIBC_TUNABLES=glibc.malloc.trim_threshold=4294967296")
    parser.add_argument("--json", action="store_true", help="also print one JSON object")
    parser.add_argument("--gloo-rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--gloo-port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if any("=" not in item for item in args.daemon_env):
        parser.error("--daemon-env: NAME=VALUE")
    if min(args.rounds, args.small_rounds, args.gets) < 1:
        parser.error("--rounds, --small-rounds and --gets: at least 1")
    for flag, path in (("--daemon", args.daemon), ("--tls-floor", args.tls_floor)):
        if args.gloo_rank is None and not os.access(path, os.X_OK):
            parser.error(f"{flag}: {path} is not an executable (build it, or name one)")
    return args


def header_line(args):
    import tensorbroker
    import torch

    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"remote_bench {datetime.datetime.now().isoformat(timespec='seconds')}: "
            f"tensorbroker {tensorbroker.__version__}, torch {torch.__version__}, "
            f"{os.cpu_count()} CPUs, load average {load}; daemon {args.daemon}"
            + "".join(f" {item}" for item in args.daemon_env) + f"; floor {args.tls_floor}")


def main():
    args = parse_args()
    if args.gloo_rank is not None:
        gloo_child(args)
        return 0
    header = header_line(args)
    workdir = tempfile.mkdtemp(prefix="tb-remote-bench.")
    errors, broker, extra, floor, gloo = [], {}, {}, {}, {}
    try:
        pki = os.path.join(workdir, "pki")
        subprocess.run(["bash", os.path.join(ROOT, "tests", "support", "make_test_pki.sh"), pki],
                       check=True, capture_output=True, timeout=120)
        broker, extra = broker_phase(args, workdir, pki, errors)
        floor, suite = floor_phase(args, pki, errors)
        header += f"; floor {suite}"
        gloo = {} if args.no_gloo else gloo_phase(args, errors)
    except Exception:  # noqa: BLE001  (an error of the run, reported below)
        errors.append(traceback.format_exc())
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    complete = all(size in broker and size in floor for size in args.sizes)
    goals = goals_of(args, broker, floor, gloo) if complete else []
    if complete:
        print_report(args, header + f"; load average at the end {load}", broker, extra, floor,
                     gloo, goals)
    if args.json:
        print(as_json(args, header, broker, extra, floor, gloo, goals, errors))
    for e in errors:
        print(f"\nERROR: {e}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
