"""One side of a GPU test, run as its own process: tensorbroker's producers and consumers are
always different processes. Usage: gpu_peer.py SOCKET ROLE [ARGS...]; prints one JSON line with
what it saw. Frameworks: "torch" or "cupy". Needs PYTHONPATH to reach the tensorbroker package."""

import json
import sys
import time

import tensorbroker

SHAPE = (100, 10000)  # float32, as in the seed: 4 MB


def framework(name):
    if name == "torch":
        import torch
        return torch
    import cupy
    return cupy


def expected(fw, fw_name, round_):
    """The tensor of round `round_`, made on cuda:0 by framework `fw` (exact in float32)."""
    if fw_name == "torch":
        base = fw.arange(SHAPE[0] * SHAPE[1], dtype=fw.float32, device="cuda:0")
    else:
        with fw.cuda.Device(0):
            base = fw.arange(SHAPE[0] * SHAPE[1], dtype=fw.float32)
    return (base * (round_ + 1) + round_).reshape(SHAPE)


def from_dlpack(fw, t):
    return fw.from_dlpack(t)


def allocated(fw, fw_name):
    """Bytes the framework's allocator holds on the device."""
    if fw_name == "torch":
        return fw.cuda.memory_allocated(0)
    return fw.get_default_memory_pool().used_bytes()


def equal(fw, fw_name, a, b):
    if fw_name == "torch":
        return bool(fw.equal(a, b))
    return bool(fw.array_equal(a, b))


def synchronize(fw, fw_name):
    if fw_name == "torch":
        fw.cuda.synchronize()
    else:
        fw.cuda.runtime.deviceSynchronize()


def produce(client, fw_name, prefix, rounds):
    """Even rounds through put() (one device-to-device copy), odd ones through create() filled
    in place on the framework's current stream, then seal(stream=that stream)."""
    fw = framework(fw_name)
    for r in range(int(rounds)):
        x = expected(fw, fw_name, r)
        name = f"{prefix}/{r}"
        if r % 2 == 0:
            client.put(name, x)
        else:
            t = client.create(name, SHAPE, "float32", device="cuda:0")
            view = from_dlpack(fw, t)
            if fw_name == "torch":
                view.copy_(x)
                stream = fw.cuda.current_stream()
            else:
                view[...] = x
                stream = fw.cuda.get_current_stream()
            t.seal(stream=stream)
            t.release()
    return {"published": int(rounds)}


def consume(client, fw_name, prefix, rounds):
    fw = framework(fw_name)
    out = {"equal": [], "alloc_growth": [], "device": [], "nbytes": SHAPE[0] * SHAPE[1] * 4}
    for r in range(int(rounds)):
        t = client.get(f"{prefix}/{r}", timeout=120)
        out["device"].append(list(t.__dlpack_device__()))
        before = allocated(fw, fw_name)
        x = from_dlpack(fw, t)
        out["alloc_growth"].append(allocated(fw, fw_name) - before)
        out["equal"].append(equal(fw, fw_name, x, expected(fw, fw_name, r)))
        del x
        t.release()
    return out


def write_sealed(client, name):
    """Writes through a sealed tensor's view in place; says what the device did. Exits at once
    after a fault (the CUDA context is gone)."""
    import os
    import torch
    t = client.get(name, timeout=60)
    x = torch.from_dlpack(t)
    try:
        x.add_(1.0)
        torch.cuda.synchronize()
    except RuntimeError as e:  # a device fault: the mapping is read-only
        print(json.dumps({"faulted": True, "error": str(e).splitlines()[0]}), flush=True)
        os._exit(0)
    return {"faulted": False}


def create_mutable(client, name):
    import torch
    t = client.create(name, (1000,), "float32", mutable=True, device="cuda:0")
    torch.from_dlpack(t).zero_()
    t.seal(stream=torch.cuda.current_stream())
    return {"created": name}


def write(client, name, value):
    import torch
    t = client.get(name, timeout=60)
    torch.from_dlpack(t).fill_(float(value))
    torch.cuda.synchronize()  # the write is done before this process says so
    return {"wrote": float(value)}


def read(client, fw_name, name):
    fw = framework(fw_name)
    t = client.get(name, timeout=60)
    x = from_dlpack(fw, t)
    synchronize(fw, fw_name)
    values = x.tolist() if fw_name == "torch" else x.get().tolist()
    return {"min": min(values), "max": max(values), "dtype": str(x.dtype)}


def cycles(client, name, count):
    import torch
    def one():
        t = client.get(name, timeout=60)
        x = torch.from_dlpack(t)
        del x
        t.release()
    one()  # warm-up: CUDA context, first mapping
    torch.cuda.synchronize()
    free_before, total = torch.cuda.mem_get_info(0)
    for _ in range(int(count)):
        one()
    torch.cuda.synchronize()
    free_after, _ = torch.cuda.mem_get_info(0)
    return {"free_before": free_before, "free_after": free_after, "total": total,
            "mappings": tensorbroker.process_mappings()}


def pinned(client, name):
    import numpy as np
    import torch
    t = client.get(name, timeout=60, pinned=True)
    x = torch.from_dlpack(t)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        y = x.to("cuda:0", non_blocking=True)
    stream.synchronize()
    expected_values = torch.from_numpy(np.arange(x.numel(), dtype=np.float32))
    return {"device": t.device, "pinned": t.pinned, "is_pinned": bool(x.is_pinned()),
            "dlpack_device": list(t.__dlpack_device__()),
            "equal": bool(torch.equal(y.cpu(), expected_values)),
            "mappings": tensorbroker.process_mappings()}


def produce_bool(client, fw_name, name):
    fw = framework(fw_name)
    if fw_name == "torch":
        x = (fw.arange(1000, device="cuda:0") % 3) == 0
    else:
        x = (fw.arange(1000) % 3) == 0
    client.put(name, x)
    return {"published": name}


def consume_bool(client, fw_name, name):
    fw = framework(fw_name)
    t = client.get(name, timeout=60)
    x = from_dlpack(fw, t)
    if fw_name == "torch":
        want = (fw.arange(1000, device="cuda:0") % 3) == 0
    else:
        want = (fw.arange(1000) % 3) == 0
    return {"dtype": str(x.dtype), "equal": equal(fw, fw_name, x, want), "tb_dtype": t.dtype}


def figures(client, rounds):
    """Get latencies in microseconds (medians): CUDA with the slab handle already open in this
    process (another tensor of the slab held) vs CPU; and the first open of a slab."""
    import statistics
    import torch
    rounds = int(rounds)
    client.put("fig/cpu", torch.zeros(1024))
    client.put("fig/gpu", torch.zeros(1024, device="cuda:0"))
    client.put("fig/gpu-pin", torch.zeros(1024, device="cuda:0"))

    def timed(name):
        start = time.perf_counter()
        t = client.get(name, timeout=10)
        elapsed = time.perf_counter() - start
        t.release()
        return elapsed * 1e6

    first_open = timed("fig/gpu")  # the slab is not open in this process yet
    holder = client.get("fig/gpu-pin", timeout=10)  # keeps the slab (and its handle) open
    cuda_cached = statistics.median(timed("fig/gpu") for _ in range(rounds))
    holder.release()
    cuda_reopen = statistics.median(timed("fig/gpu") for _ in range(min(rounds, 200)))
    cpu = statistics.median(timed("fig/cpu") for _ in range(rounds))
    pool = [p for p in client.stats()["pools"] if p["device"] == "cuda:0"][0]
    return {"handles": pool["handles"], "first_open_us": first_open,
            "cuda_get_cached_handle_us": cuda_cached, "cuda_get_reopen_us": cuda_reopen,
            "cpu_get_us": cpu, "rounds": rounds}


ROLES = {"produce": produce, "consume": consume, "create_mutable": create_mutable,
         "write_sealed": write_sealed,
         "write": write, "read": read, "cycles": cycles, "pinned": pinned,
         "produce_bool": produce_bool, "consume_bool": consume_bool, "figures": figures}


def main():
    socket, role, *args = sys.argv[1:]
    client = tensorbroker.connect(socket)
    result = ROLES[role](client, *args)
    client.close()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
