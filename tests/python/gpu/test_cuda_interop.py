"""CUDA tensors between processes with PyTorch and CuPy (ctest label gpu; tests/gpu/run.sh).

Producer and consumer are always different processes (gpu_peer.py), talking to a real
tensorbrokerd that owns the device memory. Covered: torch -> torch, torch -> CuPy and
CuPy -> torch with a 100x10000 float32 tensor over ten rounds (equal values, and the consumer's
framework allocates no device memory for it); the producer has exited before the consumer reads;
a write to a mutable tensor in one process is read in another; 1,000 get/release cycles leave
device memory flat and every slab handle closed; pinned host tensors copy to the device with
non_blocking=True; bool through torch 2.x and CuPy; CuPy -> CuPy.

The daemon serves GPU memory the way TENSORBROKER_CUDA_HANDLES says (--cuda-handles: ipc, the
default, or vmm; tests/gpu/run.sh runs the module once with each). With vmm, a write through a
sealed tensor's view must fault in the writing process and leave the bytes (where the device
maps read-only; otherwise the test says so and skips).

Runs under pytest, or without it (python3 test_cuda_interop.py): the GPU machine's image may
lack pytest. Skips, with the reason, without torch built with CUDA, a usable GPU, or CuPy."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from daemon_wait import wait_until_serving  # noqa: E402  (tests/python/daemon_wait.py)

try:
    import pytest

    skip = pytest.skip
    Skipped = pytest.skip.Exception
except ImportError:  # the standalone runner below
    pytest = None

    class Skipped(Exception):
        pass

    def skip(reason):
        raise Skipped(reason)

HERE = os.path.dirname(os.path.abspath(__file__))
ROUNDS = 10
HANG_GUARD = 300  # seconds per peer; only against hangs, never a measurement
HANDLES = os.environ.get("TENSORBROKER_CUDA_HANDLES", "ipc")  # --cuda-handles of the daemon


def gpu_torch():
    """torch with a usable GPU, or skip saying why not."""
    try:
        import torch
    except ImportError:
        skip("torch is not installed")
    if not torch.cuda.is_available():
        skip(f"torch {torch.__version__} sees no usable GPU (torch.cuda.is_available() is "
             f"False; built with CUDA {torch.version.cuda})")
    return torch


def gpu_cupy():
    gpu_torch()
    try:
        import cupy
    except ImportError:
        skip("CuPy is not installed")
    return cupy


class Broker:
    """tensorbrokerd on a private socket, started on first use, stopped at exit."""
    instance = None

    def __init__(self):
        binary = os.environ.get("TENSORBROKERD")
        assert binary and os.path.exists(binary), "set TENSORBROKERD to the tensorbrokerd binary"
        self.dir = tempfile.mkdtemp(prefix="tbgpu.")
        self.socket = os.path.join(self.dir, "broker.sock")
        self.log_path = os.path.join(self.dir, "daemon.log")
        self.log = open(self.log_path, "w+")
        self.proc = subprocess.Popen(
            [binary, "--socket", self.socket, "--cuda-capacity", "8G", "--cuda-handles", HANDLES,
             "--log-level", "info"],
            stdout=self.log, stderr=subprocess.STDOUT)
        wait_until_serving(self.socket, self.proc, self.log_path)

    @classmethod
    def get(cls):
        if cls.instance is None:
            cls.instance = Broker()
        return cls.instance

    @classmethod
    def stop(cls):
        broker, cls.instance = cls.instance, None
        if broker is None:
            return 0
        broker.proc.send_signal(signal.SIGTERM)
        code = broker.proc.wait(timeout=60)
        shutil.rmtree(broker.dir, ignore_errors=True)
        return code

    def client(self):
        import tensorbroker
        return tensorbroker.connect(self.socket)


def peer(role, *args):
    """Runs gpu_peer.py ROLE ARGS in a new process; its JSON answer."""
    broker = Broker.get()
    done = subprocess.run([sys.executable, os.path.join(HERE, "gpu_peer.py"), broker.socket,
                           role, *map(str, args)], capture_output=True, text=True,
                          timeout=HANG_GUARD)
    assert done.returncode == 0, f"peer {role} failed ({done.returncode}):\n{done.stderr}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def check_pair(producer, consumer, prefix):
    # The producer runs to completion and exits before the consumer starts: the daemon, not the
    # producer, owns the memory.
    assert peer("produce", producer, prefix, ROUNDS) == {"published": ROUNDS}
    seen = peer("consume", consumer, prefix, ROUNDS)
    assert seen["equal"] == [True] * ROUNDS
    assert seen["device"] == [[2, 0]] * ROUNDS
    # Zero copy: the consumer's framework allocates nothing for the tensor (not its 4 MB).
    assert seen["alloc_growth"] == [0] * ROUNDS, seen["alloc_growth"]
    with Broker.get().client() as client:
        for r in range(ROUNDS):
            info = client.stat(f"{prefix}/{r}")
            assert (info["device"], info["leases"], info["shape"]) == ("cuda:0", 0, [100, 10000])
            client.delete(f"{prefix}/{r}")


def test_cpu_round_trip_with_this_build():
    """No GPU needed: the extension and daemon under test work at all (a bundle built elsewhere
    included), so a skip of everything else cannot hide a broken build."""
    done = subprocess.run([sys.executable, "-c", (
        "import sys, numpy, tensorbroker\n"
        "c = tensorbroker.connect(sys.argv[1])\n"
        "c.put('cpu/smoke', numpy.array([1.5, 2.5], numpy.float32))\n"
        "print(c.get('cpu/smoke', timeout=10).numpy().tolist())"), Broker.get().socket],
        capture_output=True, text=True, timeout=HANG_GUARD)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[1.5, 2.5]"


def test_torch_to_torch():
    gpu_torch()
    check_pair("torch", "torch", "t2t")


def test_torch_to_cupy():
    gpu_cupy()
    check_pair("torch", "cupy", "t2c")


def test_cupy_to_torch():
    gpu_cupy()
    check_pair("cupy", "torch", "c2t")


def test_cupy_to_cupy():
    gpu_cupy()
    check_pair("cupy", "cupy", "c2c")


def test_the_gpu_pool_says_how_its_memory_travels():
    gpu_torch()
    assert gpu_pool()["handles"] == f"cuda-{HANDLES}"


def test_a_write_through_a_sealed_view_faults_in_the_writer_and_the_bytes_stay():
    torch = gpu_torch()
    if HANDLES != "vmm":
        skip("legacy CUDA IPC maps every view read-write")
    with Broker.get().client() as client:
        client.put("ro/x", torch.full((1024,), 2.0, device="cuda:0"))
    seen = peer("write_sealed", "ro/x")
    print(f"write through a sealed view: {seen}", flush=True)
    if not seen["faulted"]:
        delete("ro/x")
        skip("CUDA device 0 maps device memory read-write only: the DLPack READ_ONLY flag is "
             "the only guard there")
    assert peer("read", "torch", "ro/x") == {"min": 2.0, "max": 2.0, "dtype": "torch.float32"}
    delete("ro/x")


def delete(*names):
    with Broker.get().client() as client:
        for name in names:
            client.delete(name)


def gpu_pool():
    with Broker.get().client() as client:
        return [p for p in client.stats()["pools"] if p["device"] == "cuda:0"][0]


def test_mutable_write_in_one_process_is_read_in_another():
    gpu_torch()
    peer("create_mutable", "mut/x")
    assert peer("read", "torch", "mut/x")["max"] == 0.0
    peer("write", "mut/x", 7.5)
    assert peer("read", "torch", "mut/x") == {"min": 7.5, "max": 7.5, "dtype": "torch.float32"}
    delete("mut/x")


# "Flat": free device memory after 1,000 cycles is within 8 MiB of before (the driver hands out
# device memory in 2 MiB pages and may keep a few for its own page tables), where a leak of the
# 1 MiB tensor, or of its mapping, per cycle would show as about 1 GiB.
FLAT_SLACK = 8 << 20


def test_get_release_cycles_leave_device_memory_flat_and_handles_closed():
    torch = gpu_torch()
    before = gpu_pool()
    with Broker.get().client() as client:
        client.put("cyc/x", torch.ones(256, 1024, device="cuda:0"))  # 1 MiB
    seen = peer("cycles", "cyc/x", 1000)
    assert seen["free_before"] - seen["free_after"] <= FLAT_SLACK, seen
    assert seen["mappings"]["open_cuda_slabs"] == 0
    # VMM: the one slab's mapping stays cached (until the daemon frees the slab), not one per get.
    assert seen["mappings"]["cached_cuda_slabs"] == (1 if HANDLES == "vmm" else 0), seen
    with Broker.get().client() as client:
        assert client.stat("cyc/x")["leases"] == 0
    delete("cyc/x")
    after = gpu_pool()
    # The broker's own books: back to where they were (slabs freed with their last tensor).
    assert (after["used_bytes"], after["segments"]) == (before["used_bytes"], before["segments"])


def test_pinned_host_tensor_copies_to_the_device_non_blocking():
    gpu_torch()
    import numpy as np
    with Broker.get().client() as client:
        client.put("pin/x", np.arange(1 << 22, dtype=np.float32))  # 16 MiB
    seen = peer("pinned", "pin/x")
    assert (seen["device"], seen["pinned"], seen["is_pinned"]) == ("cuda_host", True, True)
    assert seen["dlpack_device"] == [1, 0]  # torch and NumPy take no kDLCUDAHost capsules
    assert seen["equal"] is True
    assert seen["mappings"]["pinned_segments"] >= 1
    delete("pin/x")


def test_bool_through_torch_and_cupy():
    gpu_torch()
    peer("produce_bool", "torch", "bool/t")
    seen = peer("consume_bool", "torch", "bool/t")
    assert seen == {"dtype": "torch.bool", "equal": True, "tb_dtype": "bool"}
    gpu_cupy()
    seen = peer("consume_bool", "cupy", "bool/t")
    assert seen == {"dtype": "bool", "equal": True, "tb_dtype": "bool"}
    peer("produce_bool", "cupy", "bool/c")
    seen = peer("consume_bool", "torch", "bool/c")
    assert seen == {"dtype": "torch.bool", "equal": True, "tb_dtype": "bool"}
    delete("bool/t", "bool/c")


def test_figures():
    """Prints latencies for the record (run.sh collects them); asserts nothing about time."""
    gpu_torch()
    print("FIGURES " + json.dumps(peer("figures", 2000)), flush=True)
    delete("fig/cpu", "fig/gpu", "fig/gpu-pin")


if pytest is not None:
    @pytest.fixture(scope="module", autouse=True)
    def _stop_broker_at_the_end():
        yield
        assert Broker.stop() == 0, "tensorbrokerd did not exit cleanly"


def main():
    """Runs every test_* here without pytest; exit status 1 if any failed."""
    results = {}
    for name, test in sorted((n, f) for n, f in globals().items() if n.startswith("test_")):
        start = time.monotonic()
        try:
            test()
            results[name] = "PASSED"
        except Skipped as e:
            results[name] = f"SKIPPED: {e}"
        except Exception as e:  # noqa: BLE001 - report and go on
            results[name] = f"FAILED: {type(e).__name__}: {e}"
        print(f"{name}: {results[name]} ({time.monotonic() - start:.1f} s)", flush=True)
    code = Broker.stop()
    if code != 0:
        print(f"tensorbrokerd exited with {code}")
    failed = [n for n, r in results.items() if r.startswith("FAILED")]
    print(f"{len(results) - len(failed)} of {len(results)} passed or skipped; "
          f"{len(failed)} failed", flush=True)
    return 1 if failed or code != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
