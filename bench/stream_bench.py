#!/usr/bin/python3
"""Streaming frames from one producer process to consumer processes (issue 17): figures only.

Side by side in one run, for every frame size (4 KiB, 1 MiB, 64 MiB) and consumer count (1, 4),
four ways of streaming uint8 frames from one producer process to its consumer processes:

  tb-ring       tensorbroker's stream ring: the producer loan()s a slot of a StreamWriter
                (slots = 2 + consumers, frames_per_reader=1), fills it through np.asarray,
                stamps it and publish()es (no daemon round trip); each consumer iterates a
                StreamReader (the newest frame each time: it may skip), reads the header through
                np.from_dlpack and release()s. The ring is faulted in before the stream.
  tensorbroker  the producer create()s the frame in broker memory (replace=True, keep=1), fills
                it through np.asarray(t), stamps it and seal()s it; each consumer follows with
                get(name, after_version=v), reads the header through np.from_dlpack(t) and
                release()s. A follower sees the latest frame and may skip some ("skipped");
                nothing waits for it. The bench starts its own tensorbrokerd (--capacity 2G).
  queue         torch.multiprocessing.Queue(maxsize=4), one per consumer: the producer fills a
                fresh torch tensor, stamps it, share_memory_() (the copy into shared memory that
                put() makes of an unshared tensor anyway) and put()s it into every queue; the
                consumer get()s it, reads the header and drops it. Every frame is delivered
                (the producer blocks on a full queue).
  pipe          multiprocessing.shared_memory + multiprocessing.Pipe: a ring of 4 SharedMemory
                slots that every consumer attaches once; the producer waits until every
                consumer has acknowledged slot seq % 4's previous frame, fills it, stamps it and
                send()s (seq, slot) on a Pipe per consumer; the consumer reads the header and
                sends the ack back. Every frame is delivered, none is torn.

Every frame's first 16 bytes are (seq, t_ns) as two int64 and its last 8 bytes seq again:
t_ns = time.clock_gettime_ns(CLOCK_MONOTONIC), stamped by the producer after the fill and right
before it publishes / sends; a consumer takes its own reading once it holds the frame and has
read the header (and the tail: a tail that differs from the header counts as torn). The fill is
the same for all four: one numpy copy of a prepared buffer into the frame.

Two phases per (size, consumers, contender), in fresh processes:
  paced    the producer publishes at a fixed rate, the same for all four and below every
           contender's maximum (see DEFAULTS; the first 10 % of the frames, at least 3, are a
           warm-up): publication-to-consumer latency p50 / p99 over every consumer's frames.
  unpaced  the producer publishes as fast as it can: frames per second delivered to each
           consumer (mean over the consumers: delivered frames / time from the phase's start to
           its last frame), the frames it skipped (tensorbroker only; the others block the
           producer instead), the producer's own rate and the age of the frames delivered (p50).
Each cell's header also gives the fill alone: the frames per second of the same copy into one
warm buffer, with no stream at all; no contender can deliver more.

Then the issue's goals, "met" / "not met" for information only: at 1 MiB and 64 MiB tensorbroker's
p50 and p99 below both baselines' and its delivered fps above both; at 4 KiB its p50 within 2x
the pipe's. On a 2-core machine 1 producer + 4 consumers + the daemon share the cores, so the
p99s are the scheduler's. With --repeat R the whole run is made R times (each cell's
contenders start in a turned order), then p50 and p99 over all runs' samples pooled, the median
of the runs' frame rates (and each figure's range), the goals judged on those, and in how many
runs each goal was met. The exit code is 1 when a cell failed or a frame was torn or out of
order.

  PYTHONPATH=build/python /usr/bin/python3 bench/stream_bench.py [--daemon build/daemon/tensorbrokerd]
      [--quick] [--sizes 4K,1M,64M] [--consumers 1,4]
      [--contenders tb-ring,tensorbroker,queue,pipe] [--rate FPS] [--scale K] [--repeat R]
      [--capacity 2G]
"""

import argparse
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from array import array
from multiprocessing import connection, shared_memory

import numpy as np
import torch
import torch.multiprocessing

import tensorbroker

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "python"))
from daemon_wait import wait_until_serving  # noqa: E402  (tests/python/daemon_wait.py)

CONTENDERS = ("tb-ring", "tensorbroker", "queue", "pipe")
OURS = ("tb-ring", "tensorbroker")
HEADER = struct.Struct("<qq")  # (seq, t_ns) at offset 0
TAIL = struct.Struct("<q")  # seq in the last 8 bytes
SENTINEL = -1  # the seq of the frame (tensorbroker) that ends the stream
QUEUE_DEPTH = 4  # torch Queue(maxsize=...) per consumer
RING = 4  # SharedMemory slots of the pipe contender
WAIT = 120.0  # seconds: a consumer or producer stuck this long is an error, not a figure
PHASE_GAP = 0.25  # seconds between the paced and the unpaced phase (consumers drain)
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
# size: {consumers: (paced frames per second, paced frames, unpaced frames)}. The paced rate is
# the same for every contender of a cell and well below the slowest one's maximum on the 2-core
# build machine (the Queue's: about 550-1000 / 250-350 frames/s at 4 KiB with 1 / 4 consumers,
# 260 / 140 at 1 MiB, 3 / 2 at 64 MiB, where every frame is fresh memory faulted in twice: the
# fill and share_memory_()). Other consumer counts take the row of 4, other sizes the row of the
# next default size up.
DEFAULTS = {4 * KiB: {1: (300, 600, 1000), 4: (100, 300, 300)},
            1 * MiB: {1: (125, 300, 300), 4: (60, 200, 200)},
            64 * MiB: {1: (1.5, 45, 60), 4: (1, 40, 40)}}


def now_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def parse_size(text):
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    scale = {"K": KiB, "M": MiB, "G": GiB}.get(text[-1:], 1)
    value = int(float(text[:-1] if scale > 1 else text) * scale)
    if value < 32:
        raise argparse.ArgumentTypeError(f"frames must be at least 32 bytes, not {value}")
    return value


def size_label(n):
    for unit, name in ((GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB")):
        if n >= unit and n % unit == 0:
            return f"{n // unit} {name}"
    return f"{n} B"


def fmt_ns(ns):
    if ns is None:
        return "-"
    if ns < 1e6:
        return f"{ns / 1e3:.1f} us"
    if ns < 1e9:
        return f"{ns / 1e6:.2f} ms"
    return f"{ns / 1e9:.2f} s"


def pct(samples, q):
    """The q-quantile (nearest rank) of sorted `samples`, or None."""
    if not samples:
        return None
    return samples[min(len(samples) - 1, int(q * len(samples)))]


class Plan:
    """What one cell runs: frame size, consumers, the paced rate and frame counts."""

    def __init__(self, size, consumers, quick, rate=None, scale=1):
        row = DEFAULTS[min([d for d in DEFAULTS if d >= size] or [max(DEFAULTS)])]
        default_rate, paced, unpaced = row[1 if consumers == 1 else 4]
        self.size, self.consumers = size, consumers
        self.rate = rate or default_rate
        paced, unpaced = paced * scale, unpaced * scale
        if quick:
            paced, unpaced = max(8, paced // 10), max(8, unpaced // 10)
        self.paced, self.unpaced = paced, unpaced
        self.warm = max(3, paced // 10)  # paced seqs [0, warm) are not measured
        self.total = paced + unpaced  # data seqs [0, paced) paced, [paced, total) unpaced


# --- the producer's side, the same for all: fill, stamp ------------------------------------


def make_payload(size):
    payload = (np.arange(size, dtype=np.uint32) % 251).astype(np.uint8)
    return payload


def fill_alone(size, seconds=0.5):
    """Frames per second of the fill alone (the same numpy copy into one warm buffer, no
    stream): the ceiling of every contender's unpaced rate at this size, since each fills every
    frame it publishes."""
    payload, frame = make_payload(size), np.empty(size, np.uint8)
    np.copyto(frame, payload)  # faulted in, as every contender's frames are
    frames, start = 0, now_ns()
    while frames < 3 or now_ns() - start < seconds * 1e9:
        np.copyto(frame, payload)
        frames += 1
    return frames / (now_ns() - start) * 1e9


def stamp(buf, size, seq):
    """Writes (seq, now) at the frame's start and seq at its end; returns now."""
    t = now_ns()
    HEADER.pack_into(buf, 0, seq, t)
    TAIL.pack_into(buf, size - 8, seq)
    return t


class Recorder:
    """A consumer's view of the stream: latency samples per phase, delivered and torn frames."""

    def __init__(self, plan):
        self.plan = plan
        self.paced = array("q")
        self.unpaced = array("q")
        self.delivered = 0  # unpaced frames received
        self.last_at = 0  # when the last unpaced frame was held
        self.last_seq = -1
        self.torn = 0  # tail != header (or != the seq the pipe sent)
        self.disorder = 0  # a seq not above the previous one

    def frame(self, seq, t_ns, tail, now):
        if tail != seq:
            self.torn += 1
        if seq <= self.last_seq:
            self.disorder += 1
        self.last_seq = seq
        if seq >= self.plan.paced:
            self.unpaced.append(now - t_ns)
            self.delivered += 1
            self.last_at = now
        elif seq >= self.plan.warm:
            self.paced.append(now - t_ns)

    def result(self):
        return {"paced": self.paced.tobytes(), "unpaced": self.unpaced.tobytes(),
                "delivered": self.delivered, "last_at": self.last_at, "torn": self.torn,
                "disorder": self.disorder}


def run_producer(plan, publish, finish, out):
    """Paced then unpaced: calls publish(seq) for every data seq, then finish()."""
    period = int(1e9 / plan.rate)
    next_at = now_ns()
    first_measured = last_measured = 0
    for seq in range(plan.paced):
        delay = next_at - now_ns()
        if delay > 0:
            time.sleep(delay / 1e9)
        last_measured = now_ns()
        if seq == plan.warm:
            first_measured = last_measured
        publish(seq)
        next_at += period
        late = now_ns() - next_at
        if late > period:  # behind by more than a period: no burst to catch up
            next_at += late
    time.sleep(PHASE_GAP)
    start = now_ns()
    for seq in range(plan.paced, plan.total):
        publish(seq)
    end = now_ns()
    finish()
    gaps = plan.paced - plan.warm - 1  # between the measured frames' starts
    out["paced_rate"] = gaps / max(1, last_measured - first_measured) * 1e9 if gaps > 0 else 0
    out["unpaced_start"] = start
    out["producer_fps"] = plan.unpaced / max(1, end - start) * 1e9


# --- tensorbroker ---------------------------------------------------------------------------


def tb_producer(plan, setup, out):
    client = tensorbroker.connect(setup["socket"])
    payload = make_payload(plan.size)
    name, size = setup["name"], plan.size

    def publish(seq):
        t = client.create(name, (size,), "uint8", replace=True, keep=1)
        a = np.asarray(t)
        np.copyto(a, payload)
        stamp(a, size, seq)
        t.seal()
        del a
        t.release()

    yield  # ready
    run_producer(plan, publish, lambda: publish(SENTINEL), out)
    yield  # done
    client.close()


def tb_consumer(plan, setup, index, rec):
    client = tensorbroker.connect(setup["socket"])
    name, tail_at = setup["name"], plan.size - 8
    yield  # ready
    v = 0
    while True:
        t = client.get(name, timeout=WAIT, after_version=v)
        v = t.version
        a = np.from_dlpack(t)  # read-only view; about 3 us less than np.asarray(t) here
        seq, t_ns = HEADER.unpack_from(a, 0)
        (tail,) = TAIL.unpack_from(a, tail_at)
        now = now_ns()
        del a
        t.release()
        if seq == SENTINEL:
            break
        rec.frame(seq, t_ns, tail, now)
    yield
    client.close()


# --- tensorbroker stream ring ---------------------------------------------------------------


WARM_SEQ = -2  # the seq of the frames that fault the ring's pages in before the stream


def ring_producer(plan, setup, out):
    client = tensorbroker.connect(setup["socket"])
    payload = make_payload(plan.size)
    size = plan.size
    # Each consumer holds one frame at a time: the newest, one per consumer and one to fill
    # is every slot the writer could ever need, so it never waits for a reader.
    slots = 2 + plan.consumers
    writer = client.stream_writer(setup["name"], (size,), "uint8", slots=slots,
                                  max_readers=plan.consumers, frames_per_reader=1)

    def publish(seq):
        t = writer.loan(WAIT)
        a = np.asarray(t)
        np.copyto(a, payload)
        stamp(a, size, seq)
        del a
        t.release()
        writer.publish()

    for _ in range(slots):  # a ring in use is warm: fault its pages in (as the pipe's)
        publish(WARM_SEQ)
    yield  # ready
    run_producer(plan, publish, writer.close, out)
    yield  # done
    client.close()


def ring_consumer(plan, setup, index, rec):
    client = tensorbroker.connect(setup["socket"])
    reader = client.stream_reader(setup["name"], timeout=WAIT)
    tail_at = plan.size - 8
    yield  # ready: the writer took this reader
    for t in reader:  # the newest frame each time, until the writer closes the stream
        a = np.from_dlpack(t)
        seq, t_ns = HEADER.unpack_from(a, 0)
        (tail,) = TAIL.unpack_from(a, tail_at)
        now = now_ns()
        del a
        t.release()
        if seq != WARM_SEQ:
            rec.frame(seq, t_ns, tail, now)
    yield
    reader.close()
    client.close()


# --- torch.multiprocessing.Queue ------------------------------------------------------------


def queue_producer(plan, setup, out):
    queues = setup["queues"]
    payload = make_payload(plan.size)
    size = plan.size

    def publish(seq):
        t = torch.empty(size, dtype=torch.uint8)
        a = t.numpy()
        np.copyto(a, payload)
        stamp(a, size, seq)
        del a
        t.share_memory_()
        for q in queues:
            q.put(t, timeout=WAIT)

    def finish():
        for q in queues:
            q.put(None, timeout=WAIT)
        for q in queues:
            q.close()
            q.join_thread()  # everything handed to the pipes before we report

    yield
    run_producer(plan, publish, finish, out)
    yield


def queue_consumer(plan, setup, index, rec):
    q = setup["queues"][index]
    tail_at = plan.size - 8
    yield
    while True:
        t = q.get(timeout=WAIT)
        if t is None:
            break
        a = t.numpy()
        seq, t_ns = HEADER.unpack_from(a, 0)
        (tail,) = TAIL.unpack_from(a, tail_at)
        now = now_ns()
        del a, t
        rec.frame(seq, t_ns, tail, now)
    yield


# --- multiprocessing.shared_memory + Pipe ---------------------------------------------------


def attach(names, size):
    segments = [shared_memory.SharedMemory(name=n) for n in names]
    views = [np.ndarray((size,), np.uint8, buffer=s.buf) for s in segments]
    return segments, views


def detach(segments, views):
    views.clear()
    for s in segments:
        s.close()


def pipe_producer(plan, setup, out):
    conns = setup["producer_ends"]
    segments, views = attach(setup["slots"], plan.size)
    payload = make_payload(plan.size)
    size = plan.size
    acked = [-1] * len(conns)
    for view in views:  # a ring in use is warm: fault its pages in before the stream
        np.copyto(view, payload)

    def publish(seq):
        slot = seq % RING
        for c, conn in enumerate(conns):  # every consumer is done with this slot's last frame
            while acked[c] < seq - RING:
                if not conn.poll(WAIT):
                    raise TimeoutError(f"no ack from consumer {c} in {WAIT} s")
                acked[c] = conn.recv()
        view = views[slot]
        np.copyto(view, payload)
        stamp(view, size, seq)
        for conn in conns:
            conn.send((seq, slot))

    def finish():
        for conn in conns:
            conn.send(None)

    try:
        yield
        run_producer(plan, publish, finish, out)
        yield
    finally:
        detach(segments, views)


def pipe_consumer(plan, setup, index, rec):
    conn = setup["consumer_ends"][index]
    segments, views = attach(setup["slots"], plan.size)
    tail_at = plan.size - 8
    try:
        yield
        while True:
            if not conn.poll(WAIT):
                raise TimeoutError(f"no frame in {WAIT} s")
            msg = conn.recv()
            if msg is None:
                break
            sent, slot = msg
            view = views[slot]
            seq, t_ns = HEADER.unpack_from(view, 0)
            (tail,) = TAIL.unpack_from(view, tail_at)
            now = now_ns()
            conn.send(sent)
            rec.frame(seq, t_ns, tail if sent == seq else ~tail, now)
        yield
    finally:
        detach(segments, views)


ROLES = {"tb-ring": (ring_producer, ring_consumer),
         "tensorbroker": (tb_producer, tb_consumer), "queue": (queue_producer, queue_consumer),
         "pipe": (pipe_producer, pipe_consumer)}


# --- the child processes --------------------------------------------------------------------


def child_main(contender, plan, setup, index, report):
    """A producer (index None) or consumer process: says "ready" on `report`, waits for the go
    (a message back on it), runs, sends its result dict (or {"error": traceback}), and waits for
    the word to exit (the queue's producer must live until its consumers have taken their
    frames' descriptors from it) before it cleans up."""
    try:
        producer, consumer = ROLES[contender]
        out = {}
        if index is None:
            steps = producer(plan, setup, out)
        else:
            rec = Recorder(plan)
            steps = consumer(plan, setup, index, rec)
        next(steps)  # connected / attached
        report.send("ready")
        recv(report, WAIT)
        next(steps)  # the stream
        report.send(out if index is None else rec.result())
        recv(report, WAIT)
        for _ in steps:  # clean up
            pass
    except BaseException:
        try:
            report.send({"error": traceback.format_exc()})
        except OSError:
            pass  # the bench is gone
    finally:
        report.close()


def run_cell(ctx, contender, plan, socket, cell_id, client):
    """One (contender, size, consumers): fresh processes, both phases. Returns the results."""
    setup, cleanup = {}, []
    n = plan.consumers
    if contender in OURS:
        setup = {"socket": socket, "name": f"stream/{cell_id}"}
        cleanup.append(lambda: client.list(setup["name"]) and client.delete(setup["name"]))
    elif contender == "queue":
        setup = {"queues": [ctx.Queue(maxsize=QUEUE_DEPTH) for _ in range(n)]}
        cleanup.extend(q.close for q in setup["queues"])
    else:
        slots = []
        try:
            for _ in range(RING):
                slots.append(shared_memory.SharedMemory(create=True, size=plan.size))
                cleanup.append(lambda s=slots[-1]: (s.close(), s.unlink()))
            ends = [ctx.Pipe() for _ in range(n)]
        except BaseException:
            for c in cleanup:
                c()
            raise
        setup = {"slots": [s.name for s in slots], "producer_ends": [e[0] for e in ends],
                 "consumer_ends": [e[1] for e in ends]}
        cleanup.extend(end.close for e in ends for end in e)
    procs, reports = [], []
    try:
        for index in [None] + list(range(n)):
            mine, theirs = ctx.Pipe()
            p = ctx.Process(target=child_main, args=(contender, plan, setup, index, theirs),
                            daemon=True)
            p.start()
            theirs.close()
            procs.append(p)
            reports.append(mine)
        gather(contender, reports, procs, WAIT)  # everyone connected / attached: "ready"
        for r in reports[1:] + reports[:1]:  # consumers first, then the producer
            r.send("go")
        results = gather(contender, reports, procs,
                         plan.paced / plan.rate + PHASE_GAP + plan.unpaced + WAIT)
        for r in reports:
            r.send("exit")
        for p in procs:
            p.join(WAIT)
        return results[0], results[1:]
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(10)
        for r in reports:
            r.close()
        for c in cleanup:
            try:
                c()
            except Exception as e:  # noqa: BLE001  (the cell's own error matters more)
                print(f"  (cleanup after {contender}: {e})", file=sys.stderr)


def recv(conn, timeout):
    if not conn.poll(timeout):
        raise TimeoutError(f"no answer in {timeout:.0f} s")
    return conn.recv()


def gather(contender, reports, procs, timeout):
    """One message from every child, in the order they come; the first error (or a child gone,
    or the time out) raises at once. Returns them in the order of `reports`."""
    deadline = time.monotonic() + timeout
    results = {}
    while len(results) < len(reports):
        waiting = [r for r in reports if r not in results]
        ready = connection.wait(waiting, timeout=max(0, deadline - time.monotonic()))
        if not ready:
            raise TimeoutError(f"{contender}: {len(waiting)} of the cell's {len(reports)} "
                               f"processes did not answer in {timeout:.0f} s")
        for r in ready:
            try:
                results[r] = r.recv()
            except EOFError:
                proc = procs[reports.index(r)]
                proc.join(10)
                raise RuntimeError(f"{contender}: {proc.name} ended without an answer "
                                   f"(exit code {proc.exitcode})") from None
            if isinstance(results[r], dict) and "error" in results[r]:
                raise RuntimeError(f"{contender}: {results[r]['error']}")
    return [results[r] for r in reports]


# --- figures --------------------------------------------------------------------------------


class Row:
    def __init__(self, contender, plan, producer, consumers):
        self.contender, self.plan = contender, plan
        paced = sorted(x for c in consumers for x in array("q", c["paced"]))
        unpaced = sorted(x for c in consumers for x in array("q", c["unpaced"]))
        self.p50, self.p99 = pct(paced, 0.5), pct(paced, 0.99)
        self.paced = paced  # sorted: pooled with other runs' by OverRuns
        self.samples = len(paced)
        self.paced_rate = producer["paced_rate"]
        self.producer_fps = producer["producer_fps"]
        start = producer["unpaced_start"]
        fps = [c["delivered"] / max(1, c["last_at"] - start) * 1e9 for c in consumers]
        self.fps = sum(fps) / len(fps)
        self.skipped = sum(plan.unpaced - c["delivered"] for c in consumers) / len(consumers)
        paced_expected = plan.paced - plan.warm
        self.paced_skipped = sum(paced_expected - len(array("q", c["paced"]))
                                 for c in consumers) / len(consumers)
        self.age_p50 = pct(unpaced, 0.5)
        self.torn = sum(c["torn"] for c in consumers)
        self.disorder = sum(c["disorder"] for c in consumers)

    def line(self):
        skipped = f"{self.skipped:.0f} ({100 * self.skipped / self.plan.unpaced:.0f}%)"
        text = (f"{self.contender:<13} {self.plan.consumers:>4} {self.paced_rate:8.3g} "
                f"{fmt_ns(self.p50):>10} {fmt_ns(self.p99):>10} {self.samples:>6} | "
                f"{self.producer_fps:9.0f} {self.fps:11.0f} {skipped:>12} "
                f"{fmt_ns(self.age_p50):>10}")
        notes = []
        if self.paced_skipped:
            notes.append(f"{self.paced_skipped:.0f} paced frames skipped per consumer")
        if self.torn:
            notes.append(f"{self.torn} TORN frames")
        if self.disorder:
            notes.append(f"{self.disorder} frames out of order")
        return text + ("  [" + "; ".join(notes) + "]" if notes else "")


HEAD = (f"{'contender':<13} {'cons':>4} {'paced/s':>8} {'p50':>10} {'p99':>10} {'n':>6} | "
        f"{'prod fps':>9} {'deliv fps':>11} {'skipped':>12} {'age p50':>10}")


def cell_label(size, consumers):
    return f"{size_label(size)}, {consumers} consumer{'s' if consumers > 1 else ''}"


def goals(rows, title="goals"):
    """The issue's goals, one line per (size, consumers) and tensorbroker path measured. `rows`
    need contender, plan, p50, p99 and fps (a Row, or an OverRuns)."""
    print(f"\n{title} (information only): 1 MiB and 64 MiB: tensorbroker's p50 and p99 below "
          "both baselines', its delivered fps above both; 4 KiB: its p50 <= 2x the pipe's. "
          "Ratios: tensorbroker / the better baseline (named)")
    by = {(r.plan.size, r.plan.consumers, r.contender): r for r in rows}
    for size, consumers in sorted({(r.plan.size, r.plan.consumers) for r in rows}):
        for ours in OURS:
            tb = by.get((size, consumers, ours))
            if tb is None:
                continue
            label = f"{cell_label(size, consumers)}, {ours}:"
            print(f"  {label:<36} " + goal_line(size, tb, baselines(by, size, consumers)))


def baselines(by, size, consumers):
    return {c: by.get((size, consumers, c)) for c in ("queue", "pipe")}


def goal_checks(size, tb, base):
    """The goal of a cell for one tensorbroker row `tb` against the baselines' rows: a list of
    (what, met, ratio, against) for each figure measured, or a string saying why there is no
    goal or no measurement."""
    if size == 4 * KiB:
        pipe = base["pipe"]
        if pipe is None or pipe.p50 is None or tb.p50 is None:
            return "p50 <= 2x pipe: not measured (no pipe row)"
        ratio = tb.p50 / pipe.p50
        return [("p50 <= 2x pipe", ratio <= 2, ratio, "pipe")]
    if size not in (1 * MiB, 64 * MiB):
        return "no goal at this size"
    if None in base.values():
        missing = " and ".join(c for c, r in base.items() if r is None)
        return f"not measured (no {missing} row)"
    checks = []
    for what, lower in (("p50", True), ("p99", True), ("fps", False)):
        mine = getattr(tb, what)
        theirs = {c: getattr(r, what) for c, r in base.items()}
        if mine is None or None in theirs.values():
            checks.append((what, None, None, None))
            continue
        best = (min if lower else max)(theirs, key=theirs.get)
        ratio = mine / theirs[best] if theirs[best] else float("inf")
        checks.append((what, ratio < 1 if lower else ratio > 1, ratio, best))
    return checks


def goal_line(size, tb, base):
    checks = goal_checks(size, tb, base)
    if isinstance(checks, str):
        return checks
    if size == 4 * KiB:
        (what, met, ratio, _), = checks
        return (f"{what}: {'met' if met else 'not met'} "
                f"({ratio:.2f}x: {fmt_ns(tb.p50)} vs {fmt_ns(base['pipe'].p50)})")
    return ", ".join(f"{what} -" if met is None else
                     f"{what} {'met' if met else 'not met'} ({ratio:.2f}x {best})"
                     for what, met, ratio, best in checks)


class OverRuns:
    """One contender of one cell over several runs, what the goals are judged on: p50 and p99
    over every run's paced samples pooled (a p99 over one run's 41-1,080 samples is one of its
    few slowest frames; pooled, the runs' samples estimate it together), the median of the
    runs' delivered fps; and the smallest and largest run's figure of each."""

    def __init__(self, rows):
        self.contender, self.plan = rows[0].contender, rows[0].plan
        pooled = sorted(x for r in rows for x in r.paced)
        self.p50, self.p99, self.samples = pct(pooled, 0.5), pct(pooled, 0.99), len(pooled)
        fps = [r.fps for r in rows if r.fps is not None]
        self.fps = statistics.median(fps) if fps else None
        self.spread = {}
        for what in ("p50", "p99", "fps"):
            values = sorted(getattr(r, what) for r in rows if getattr(r, what) is not None)
            self.spread[what] = (values[0], values[-1]) if values else (None, None)

    def line(self, fill):
        def figure(what, fmt):
            low, high = self.spread[what]
            if getattr(self, what) is None:
                return "-"
            return f"{fmt(getattr(self, what))} ({fmt(low)}-{fmt(high)})"
        share = f"{100 * self.fps / fill:.0f}%" if fill and self.fps else "-"
        return (f"{self.contender:<13} {self.plan.consumers:>4} {figure('p50', fmt_ns):>28} "
                f"{figure('p99', fmt_ns):>28} {self.samples:>6} "
                f"{figure('fps', lambda x: f'{x:.0f}'):>20} {share:>8}")


def summary(rows, fills, runs):
    """Over `runs` runs: each cell's figures over the runs (OverRuns), the goals judged on them,
    and in how many runs each goal was met on that run's own figures."""
    print(f"\nover {runs} runs: p50 and p99 over the runs' paced samples pooled (n of them), "
          "deliv fps the median of the runs'; in brackets the smallest and the largest run's "
          "figure; fps as a share of the fill alone (the median of the runs')")
    print(f"{'contender':<13} {'cons':>4} {'p50':>28} {'p99':>28} {'n':>6} {'deliv fps':>20} "
          f"{'of fill':>8}")
    groups = {}
    for r in rows:
        groups.setdefault((r.plan.size, r.plan.consumers, r.contender), []).append(r)
    over = []
    for size, consumers in sorted({key[:2] for key in groups}):
        fill = statistics.median(fills[size])
        print(f"{cell_label(size, consumers)} (the fill alone: {fill:.0f} frames/s)")
        for contender in CONTENDERS:
            if (size, consumers, contender) in groups:
                over.append(OverRuns(groups[(size, consumers, contender)]))
                print(over[-1].line(fill))
    goals(over, f"goals over the {runs} runs")
    print(f"\ngoals run by run (information only): in how many of the {runs} runs each was met")
    per_run = {}
    for r in rows:
        per_run.setdefault(r.run, {})[(r.plan.size, r.plan.consumers, r.contender)] = r
    for size, consumers in sorted({key[:2] for key in groups}):
        for ours in OURS:
            tally = {}
            for by in per_run.values():
                tb = by.get((size, consumers, ours))
                checks = goal_checks(size, tb, baselines(by, size, consumers)) if tb else None
                if not isinstance(checks, list):
                    continue
                for what, met, _, _ in checks:
                    hits, seen = tally.get(what, (0, 0))
                    tally[what] = (hits + bool(met), seen + (met is not None))
            if tally:
                label = f"{cell_label(size, consumers)}, {ours}:"
                print(f"  {label:<36} " + ", ".join(f"{what} {hits}/{seen}"
                                                     for what, (hits, seen) in tally.items()))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--daemon", default=os.path.join(here, "..", "build", "daemon",
                                                         "tensorbrokerd"))
    parser.add_argument("--capacity", default="2G", help="the daemon's --capacity (2G)")
    parser.add_argument("--quick", action="store_true",
                        help="a tenth of the frames (at least 8 per phase)")
    parser.add_argument("--sizes", default="4K,1M,64M",
                        type=lambda s: [parse_size(x) for x in s.split(",")])
    parser.add_argument("--consumers", default="1,4",
                        type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--contenders", default=",".join(CONTENDERS),
                        type=lambda s: [x.strip() for x in s.split(",")])
    parser.add_argument("--rate", type=float, default=None,
                        help="paced frames per second in every cell (default: per size and "
                             "consumers, see DEFAULTS)")
    parser.add_argument("--scale", type=int, default=1,
                        help="frames per phase times this (more samples for the p99s)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="the whole run this many times, each cell's contenders in a turned "
                             "order; then p50/p99 over the runs' samples pooled and the median "
                             "fps, and the goals judged on those")
    args = parser.parse_args()
    unknown = [c for c in args.contenders if c not in CONTENDERS]
    if unknown or not args.contenders:
        parser.error(f"--contenders: one or more of {', '.join(CONTENDERS)}; not {unknown}")
    if any(c < 1 for c in args.consumers):
        parser.error("--consumers: at least 1")
    if args.scale < 1:
        parser.error("--scale: at least 1")
    if args.repeat < 1:
        parser.error("--repeat: at least 1")

    # Children come from a fork server that has imported numpy, torch and tensorbroker and
    # done nothing else: they start in milliseconds, and no client, gRPC thread or queue thread
    # exists when they are forked (each child connects to the daemon itself). ("__main__" in
    # the preload list would do nothing: Python 3.11's forkserver drops the main path.)
    ctx = torch.multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["numpy", "torch", "torch.multiprocessing", "tensorbroker"])

    workdir = tempfile.mkdtemp(prefix="tb-stream-bench.")
    socket = os.path.join(workdir, "broker.sock")
    daemon = client = None
    log = open(os.path.join(workdir, "daemon.log"), "wb")
    rows, failures = [], []
    try:
        if any(c in OURS for c in args.contenders):
            daemon = subprocess.Popen([args.daemon, "--socket", socket, "--capacity",
                                       args.capacity, "--cuda-capacity", "0",
                                       "--log-level", "warning"], stderr=log)
            wait_until_serving(socket, daemon, log.name)
            client = tensorbroker.connect(socket)
        affinity = len(os.sched_getaffinity(0))
        print(f"tensorbroker {tensorbroker.__version__}, torch {torch.__version__}, "
              f"numpy {np.__version__}, Python {sys.version.split()[0]}; "
              f"{os.cpu_count()} CPUs ({affinity} usable), not pinned; "
              f"load average {os.getloadavg()[0]:.2f}; "
              f"torch sharing strategy {torch.multiprocessing.get_sharing_strategy()}; "
              f"start method forkserver")
        print("latency: CLOCK_MONOTONIC from the producer's stamp (after the fill, before "
              "publish/send) to the consumer holding the frame with its header read; "
              "p50/p99 over every consumer's paced frames; deliv fps: per consumer (mean), "
              "skipped: per consumer in the unpaced phase; age p50: latency in the unpaced phase")
        cell_id = 0
        fills = {}  # size: the fill alone's frames per second, one per run
        for run in range(args.repeat):
            if args.repeat > 1:
                print(f"\n=== run {run + 1} of {args.repeat} (load average "
                      f"{os.getloadavg()[0]:.2f})")
            # Each run starts the cell with another contender: none always goes first.
            turn = run % len(args.contenders)
            order = args.contenders[turn:] + args.contenders[:turn]
            run_rows = []
            for size in args.sizes:
                fills.setdefault(size, []).append(fill_alone(size))
                for consumers in args.consumers:
                    plan = Plan(size, consumers, args.quick, args.rate, args.scale)
                    print(f"\n{cell_label(size, consumers)}: paced at {plan.rate:g}/s "
                          f"({plan.paced} frames, the first {plan.warm} not measured), then "
                          f"{plan.unpaced} unpaced; the fill alone: {fills[size][-1]:.0f} "
                          "frames/s")
                    print(HEAD, flush=True)
                    for contender in order:
                        cell_id += 1
                        where = f"{contender}, {size_label(size)}, {consumers}"
                        try:
                            producer, results = run_cell(ctx, contender, plan, socket, cell_id,
                                                         client)
                        except Exception as e:  # noqa: BLE001  (report it, go on)
                            failures.append(f"{where}: {e}")
                            print(f"{contender:<13} {consumers:>4} FAILED (see below)",
                                  flush=True)
                            continue
                        row = Row(contender, plan, producer, results)
                        row.run = run
                        run_rows.append(row)
                        print(row.line(), flush=True)
                        if row.torn or row.disorder:
                            failures.append(f"{where}: {row.torn} torn frames, "
                                            f"{row.disorder} out of order")
            goals(run_rows, "goals" if args.repeat == 1 else f"goals of run {run + 1}")
            rows.extend(run_rows)
        if args.repeat > 1:
            summary(rows, fills, args.repeat)
        if client is not None:
            stats = client.stats()
            print(f"\ndaemon at the end: {stats['tensors']} tensors, {stats['leases']} leases, "
                  f"{stats['pending']} pending, {stats['used_bytes']} bytes used")
            client.close()
            client = None
    finally:
        if client is not None:
            client.close()
        if daemon is not None:
            daemon.terminate()
            code = daemon.wait(60)
            if code != 0:
                failures.append(f"tensorbrokerd exited with {code} (log: {log.name})")
        log.close()
    for f in failures:
        print(f"\nERROR: {f}", file=sys.stderr)
    if failures:
        print(f"(the daemon's log: {log.name})", file=sys.stderr)
        return 1
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
