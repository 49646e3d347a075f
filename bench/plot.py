#!/usr/bin/python3
"""Draws the plots of bench/README.md from the benchmarks' saved output.

    /usr/bin/python3 bench/plot.py [--results DIR] [--out DIR]

Needs Debian's matplotlib (apt-get install python3-matplotlib); nothing else. Reads, under
--results (default: bench/results):

  size-sweep/*.json   tensorbroker_bench --json, one run per file (any --size-large, any number
                      of runs per size): Get, the zero-copy path and gRPC Put/Read against the
                      tensor's size -> latency_vs_size.png
  load_bench*.txt     what tensorbroker_load_bench printed (it has no --json): cycles per second
                      and p50/p99 against the number of client processes -> rate_vs_clients.png
  stream_bench*.txt   the "over N runs" block bench/stream_bench.py --repeat N printed (it has no
                      --json): p50 and p99 frame latency against the frame size, per contender
                      -> stream_latency_vs_size.png

and writes the PNGs under --out (default: bench/plots). A missing input skips its plot. The
figures are whatever the inputs hold: bench/README.md says which machine and which run made them.
"""

import argparse
import glob
import json
import os
import re
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)

HERE = os.path.dirname(os.path.abspath(__file__))
UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
COLOURS = {"tb-ring": "tab:blue", "tensorbroker": "tab:orange", "queue": "tab:red",
           "pipe": "tab:green"}
LABELS = {"tb-ring": "tensorbroker stream ring", "tensorbroker": "tensorbroker versioned",
          "queue": "torch.multiprocessing.Queue", "pipe": "shared_memory + Pipe"}


def size_label(nbytes):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def time_label(seconds, _pos=None):
    for unit in ("s", "ms", "us"):
        if seconds >= UNITS[unit]:
            value = seconds / UNITS[unit]
            return f"{value:g} {unit}"
    return f"{seconds / 1e-9:g} ns"


def save(fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    print(f"{path}: {os.path.getsize(path) // 1024} KiB")


def sweep_runs(results):
    runs = []
    for path in sorted(glob.glob(os.path.join(results, "size-sweep", "*.json"))):
        with open(path) as f:
            run = json.load(f)
        if run.get("errors"):
            print(f"{path}: skipped, the run reported errors: {run['errors']}", file=sys.stderr)
            continue
        runs.append(run)
    return runs


def plot_latency_vs_size(runs, out):
    # (key in "measurements", label, style): one line each, the median over the runs of a size.
    series = [
        ("large_get", "Get (local channel; the same pages, no copy)", "o-"),
        ("zero_copy_large", "Create + fill + Seal + Get + release (zero copy)", "s-"),
        ("zero_copy_large_fill", "  of which the producer's fill (one memcpy)", "s:"),
        ("grpc_put_large", "gRPC Put (1 MiB chunks)", "^-"),
        ("grpc_read_large", "gRPC Read", "v-"),
    ]
    by_size = {}
    for run in runs:
        by_size.setdefault(run["config"]["size_large"], []).append(run["measurements"])
    sizes = sorted(by_size)
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    for key, label, style in series:
        xs, ys = [], []
        for size in sizes:
            values = [m[key]["median_ns"] * 1e-9 for m in by_size[size] if key in m]
            if values:
                xs.append(size)
                ys.append(statistics.median(values))
        ax.plot(xs, ys, style, label=label, markersize=4)
    small = [m["small_get"]["median_ns"] * 1e-9 for ms in by_size.values() for m in ms
             if "small_get" in m]
    if small:
        ax.axhline(statistics.median(small), color="grey", linewidth=0.8, linestyle="--",
                   label="Get of a 4 KiB tensor, same runs")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(sizes)
    ax.set_xticklabels([size_label(s) for s in sizes], fontsize=8)
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(time_label))
    ax.set_xlabel("tensor size")
    ax.set_ylabel("time per operation (median)")
    ax.set_title("tensorbroker_bench: what a tensor's size costs", fontsize=10)
    ax.grid(True, which="major", linewidth=0.3)
    ax.legend(fontsize=7, loc="upper left")
    save(fig, os.path.join(out, "latency_vs_size.png"))


LOAD_ROW = re.compile(r"^(get/release|put/delete)\s+(\d+)\s+([\d.]+) (ns|us|ms|s)\s+"
                      r"([\d.]+) (ns|us|ms|s)\s+(\d+)\s+([\d.]+) (ns|us|ms|s)\s*$")


def load_rows(path):
    rows = {}
    with open(path) as f:
        for line in f:
            m = LOAD_ROW.match(line.strip())
            if m:
                rows.setdefault(m[1], []).append({
                    "clients": int(m[2]),
                    "p50": float(m[3]) * UNITS[m[4]],
                    "p99": float(m[5]) * UNITS[m[6]],
                    "rate": int(m[7]),
                })
    return rows


def plot_rate_vs_clients(rows, out):
    fig, (rate_ax, lat_ax) = plt.subplots(1, 2, figsize=(8.5, 3.8))
    for workload, colour in (("get/release", "tab:blue"), ("put/delete", "tab:orange")):
        data = sorted(rows.get(workload, []), key=lambda r: r["clients"])
        if not data:
            continue
        clients = [r["clients"] for r in data]
        rate_ax.plot(clients, [r["rate"] for r in data], "o-", color=colour, label=workload)
        lat_ax.plot(clients, [r["p50"] for r in data], "o-", color=colour,
                    label=f"{workload} p50")
        lat_ax.plot(clients, [r["p99"] for r in data], "o--", color=colour,
                    label=f"{workload} p99", alpha=0.6)
    for ax in (rate_ax, lat_ax):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks([1, 2, 4, 8, 16])
        ax.set_xticklabels(["1", "2", "4", "8", "16"])
        ax.set_xlabel("client processes")
        ax.grid(True, which="major", linewidth=0.3)
        ax.legend(fontsize=7)
    rate_ax.set_yticks([2000, 5000, 10000, 20000, 50000])
    rate_ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    rate_ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
    rate_ax.set_ylabel("cycles per second, all clients")
    rate_ax.set_title("rate", fontsize=10)
    lat_ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(time_label))
    lat_ax.set_ylabel("one cycle's latency")
    lat_ax.set_title("latency", fontsize=10)
    fig.suptitle("tensorbroker_load_bench: N client processes at once (2 vCPUs)", fontsize=10)
    save(fig, os.path.join(out, "rate_vs_clients.png"))


STREAM_CELL = re.compile(r"^(\d+) (KiB|MiB|GiB), (\d+) consumers?\b")
STREAM_ROW = re.compile(r"^(tb-ring|tensorbroker|queue|pipe)\s+(\d+)\s+([\d.]+) (ns|us|ms|s) "
                        r"\([^)]*\)\s+([\d.]+) (ns|us|ms|s) \([^)]*\)\s+(\d+)\s+(\d+)")


def stream_rows(path):
    rows, size = [], None
    with open(path) as f:
        for line in f:
            line = line.strip()
            cell = STREAM_CELL.match(line)
            if cell:
                size = int(cell[1]) << {"KiB": 10, "MiB": 20, "GiB": 30}[cell[2]]
                continue
            m = STREAM_ROW.match(line)
            if m and size is not None:
                rows.append({"contender": m[1], "consumers": int(m[2]), "size": size,
                             "p50": float(m[3]) * UNITS[m[4]],
                             "p99": float(m[5]) * UNITS[m[6]], "fps": int(m[8])})
    return rows


def plot_stream_latency(rows, out):
    counts = sorted({r["consumers"] for r in rows})
    fig, axes = plt.subplots(1, len(counts), figsize=(4.4 * len(counts), 3.9), sharey=True,
                             squeeze=False)
    for ax, consumers in zip(axes[0], counts):
        for contender in ("tb-ring", "pipe", "tensorbroker", "queue"):
            data = sorted((r for r in rows if r["contender"] == contender
                           and r["consumers"] == consumers), key=lambda r: r["size"])
            if not data:
                continue
            sizes = [r["size"] for r in data]
            colour = COLOURS[contender]
            ax.plot(sizes, [r["p50"] for r in data], "o-", color=colour,
                    label=f"{LABELS[contender]} p50")
            ax.plot(sizes, [r["p99"] for r in data], "--", color=colour, alpha=0.5,
                    label="p99 (dashed, same colour)" if contender == "tb-ring" else None)
        sizes = sorted({r["size"] for r in rows})
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(sizes)
        ax.set_xticklabels([size_label(s) for s in sizes])
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(time_label))
        ax.set_xlabel("frame size")
        ax.set_title(f"{consumers} consumer{'s' if consumers > 1 else ''}", fontsize=10)
        ax.grid(True, which="major", linewidth=0.3)
    axes[0][0].set_ylabel("frame latency, paced (p50 solid, p99 dashed)")
    axes[0][0].legend(fontsize=7, loc="upper left")
    fig.suptitle("bench/stream_bench.py: producer to consumer processes", fontsize=10)
    save(fig, os.path.join(out, "stream_latency_vs_size.png"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--results", default=os.path.join(HERE, "results"))
    parser.add_argument("--out", default=os.path.join(HERE, "plots"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    drew = 0
    runs = sweep_runs(args.results)
    if runs:
        plot_latency_vs_size(runs, args.out)
        drew += 1
    for path in sorted(glob.glob(os.path.join(args.results, "load_bench*.txt")))[-1:]:
        rows = load_rows(path)
        if rows:
            plot_rate_vs_clients(rows, args.out)
            drew += 1
    for path in sorted(glob.glob(os.path.join(args.results, "stream_bench*.txt")))[-1:]:
        rows = stream_rows(path)
        if rows:
            plot_stream_latency(rows, args.out)
            drew += 1
    if not drew:
        sys.exit(f"nothing to plot under {args.results}")


if __name__ == "__main__":
    main()
