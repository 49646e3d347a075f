"""A consumer process for the package tests, driven by JSON lines on stdin.

Each command names a tensor; the peer keeps what it gets in `held` under a key so later
commands can read, write, locate or release it. Answers are JSON lines on stdout."""

import ctypes
import hashlib
import json
import os
import sys
import threading

import numpy as np

import tensorbroker

torch = None
if "--no-torch" not in sys.argv:
    import torch


def raw_bytes(view):
    """The bytes a framework's view sees, in C order (framework-native, no broker call)."""
    if torch is not None and isinstance(view, torch.Tensor):
        flat = view.contiguous().reshape(-1)
        if flat.dtype == torch.bool:
            flat = flat.view(torch.uint8)
        return flat.view(torch.uint8).numpy().tobytes()
    return np.ascontiguousarray(view).tobytes()


def data_pointer(view):
    if torch is not None and isinstance(view, torch.Tensor):
        return view.data_ptr()
    return view.__array_interface__["data"][0]


def locate(address):
    """The backing file and file offset of `address`, from /proc/self/maps."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            start, end = (int(x, 16) for x in fields[0].split("-"))
            if start <= address < end:
                path = fields[5] if len(fields) > 5 else ""
                return {"file": path, "offset": int(fields[2], 16) + (address - start),
                        "perms": fields[1], "inode": int(fields[4])}
    return {"file": None, "offset": None, "perms": None, "inode": None}


def rss_anon_kib():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    raise RuntimeError("no RssAnon in /proc/self/status")


def descriptors_and_mappings():
    """Open descriptors, memory mappings, mappings of memfds (the broker's segments and files)
    and threads of this process."""
    with open("/proc/self/maps") as maps:
        lines = maps.readlines()
    memfds = sum(1 for line in lines if "/memfd:" in line)
    threads = len(os.listdir("/proc/self/task"))
    # less listdir's own descriptor
    return len(os.listdir("/proc/self/fd")) - 1, len(lines), memfds, threads


def heap_in_use_bytes():
    """Bytes the program has malloc'd and not freed: the sanitizer allocator's count when a
    sanitizer runtime is loaded (its own bookkeeping excluded), else glibc's mallinfo2()."""
    libc = ctypes.CDLL(None)
    try:
        sanitizer = libc.__sanitizer_get_current_allocated_bytes
    except AttributeError:
        sanitizer = None
    if sanitizer is not None:
        sanitizer.restype = ctypes.c_size_t
        return "sanitizer", int(sanitizer())

    class MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
            "fordblks", "keepcost")]

    libc.mallinfo2.restype = MallInfo2
    info = libc.mallinfo2()
    return "glibc", int(info.uordblks + info.hblkhd)


def smaps_rollup():
    out = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                out[parts[0].rstrip(":")] = int(parts[1])
    return out


def make_view(tensor, framework):
    if framework == "numpy":
        return np.asarray(tensor)
    if framework == "numpy_dlpack":
        return np.from_dlpack(tensor)
    if framework == "torch":
        return torch.from_dlpack(tensor)
    if framework == "torch_bool":
        return tensor.torch()
    raise ValueError(f"unknown framework {framework}")


def fetch(client, cmd):
    """A framework view of a broker tensor; the view holds its own lease."""
    tensor = client.get(cmd["name"], timeout=cmd.get("timeout", 30))
    view = make_view(tensor, cmd.get("framework", "numpy"))
    tensor.release()
    return view


def describe(view):
    return {"sha256": hashlib.sha256(raw_bytes(view)).hexdigest(), "dtype": str(view.dtype),
            "shape": list(view.shape), "pointer": data_pointer(view)}


def main():
    client = tensorbroker.connect(sys.argv[1])
    held = {}
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        try:
            if op == "exit":
                break
            key = cmd.get("key", cmd.get("name"))
            if op == "get":
                held[key] = fetch(client, cmd)
                answer = describe(held[key])
            elif op == "hash":
                answer = {"sha256": hashlib.sha256(raw_bytes(held[key])).hexdigest()}
            elif op == "locate":
                answer = locate(data_pointer(held[key]))
            elif op == "write":
                held[key][tuple(cmd["index"])] = cmd["value"]
                answer = {}
            elif op == "read":
                answer = {"value": float(held[key][tuple(cmd["index"])])}
            elif op == "writeable":
                answer = {"writeable": bool(held[key].flags.writeable)}
            elif op == "touch":
                answer = {"sum": float(held[key].sum())}
            elif op == "release":
                del held[key]
                client.ping()  # the release is queued; a call makes sure the daemon has it
                answer = {}
            elif op == "release_all":
                held.clear()
                client.ping()  # as for "release": the daemon has the releases
                answer = {}
            elif op == "hold_many":
                # Leases of every kind: Tensor objects, numpy and torch views, a raw capsule.
                for i in range(cmd["count"]):
                    t = client.get(cmd["name"], timeout=30)
                    held[f"many{i}"] = (t, np.asarray(t),
                                        torch.from_dlpack(t) if torch is not None else None,
                                        t.__dlpack__())
                client.ping()  # Gets of a version already held give their own lease back
                answer = {"leases": 1}  # one broker lease per process and version
            elif op == "cycles":
                # get / view / release, `n` times; RssAnon after a warm-up and at the end.
                def cycle():
                    t = client.get(cmd["name"], timeout=30)
                    a = np.asarray(t)
                    v = torch.from_dlpack(t) if torch is not None else None
                    del a, v
                    t.release()
                for _ in range(cmd["warmup"]):
                    cycle()
                rss = [rss_anon_kib()]  # after the warm-up, then after each of 4 quarters
                heap = [heap_in_use_bytes()[1]]
                fds_maps = [descriptors_and_mappings()]
                for quarter in range(4):
                    for _ in range(cmd["n"] // 4):
                        cycle()
                    rss.append(rss_anon_kib())
                    heap.append(heap_in_use_bytes()[1])
                    fds_maps.append(descriptors_and_mappings())
                # A later call of this client sees its queued releases done (the rule in
                # docs/architecture.md), so the daemon has them before this answer goes out.
                answer = {"rss_anon_kib": rss, "heap_in_use_bytes": heap,
                          "descriptors": [each[0] for each in fds_maps],
                          "mappings": [each[1] for each in fds_maps],
                          "memfd_mappings": [each[2] for each in fds_maps],
                          "threads": [each[3] for each in fds_maps],
                          "heap_counter": heap_in_use_bytes()[0],
                          "leases_after": client.stat(cmd["name"])["leases"]}
            elif op == "smaps":
                answer = smaps_rollup()
            elif op == "wait_forever":
                # get() with no timeout, until Ctrl-C: answers once KeyboardInterrupt arrives.
                print(json.dumps({"waiting": True}), flush=True)
                try:
                    client.get(cmd["name"])
                    answer = {"interrupted": False}
                except KeyboardInterrupt:
                    answer = {"interrupted": True}
            else:
                answer = {"error": f"unknown op {op}"}
        except Exception as e:  # reported to the test, which fails with it
            answer = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
