"""Devices from Python on a machine without a usable GPU (this project's CI): CUDA and pinned
requests raise FailedPrecondition with the reason and leave nothing behind; device spellings and
DLPack stream arguments are validated; stats() lists the memory pools. Where a GPU is usable the
refusal tests skip: tests/python/gpu covers the same calls succeeding."""

import numpy as np
import pytest

import tensorbroker


def no_gpu_reason(client):
    """The daemon-independent reason this process has no GPU, or skip if it has one."""
    try:
        t = client.create("probe/gpu", (1,), "int8", device="cuda:0")
    except tensorbroker.FailedPrecondition as e:
        return str(e)
    t.abort()
    pytest.skip("a GPU is usable here: tests/python/gpu covers CUDA")


def assert_nothing_left(client):
    stats = client.stats()
    assert (stats["pending"], stats["leases"], stats["used_bytes"]) == (0, 0, 0)


def test_create_on_cuda_raises_failed_precondition_with_the_reason(client):
    reason = no_gpu_reason(client)
    assert "cuda:0" in reason
    assert "no usable GPU" in reason or "no CUDA support" in reason
    with pytest.raises(tensorbroker.FailedPrecondition) as info:
        client.create("gpu/x", (4,), "float32", device="cuda")
    assert info.value.code == "FAILED_PRECONDITION"
    assert_nothing_left(client)


def test_put_to_cuda_raises_and_publishes_nothing(client):
    no_gpu_reason(client)
    with pytest.raises(tensorbroker.FailedPrecondition):
        client.put("gpu/y", np.arange(4, dtype=np.float32), device="cuda:0")
    assert client.list() == []
    assert_nothing_left(client)


@pytest.mark.parametrize("device", ["tpu", "cuda:-1", "cuda:x", "CPU", "cuda:0:1", ""])
def test_malformed_devices_are_invalid_argument(client, device):
    with pytest.raises(tensorbroker.InvalidArgument) as info:
        client.create("dev/x", (2,), "int8", device=device)
    assert "device" in str(info.value)
    with pytest.raises(ValueError):  # InvalidArgument is a ValueError
        client.put("dev/x", np.zeros(2, np.int8), device=device)
    assert_nothing_left(client)


def test_torch_device_objects_are_accepted(client):
    torch = pytest.importorskip("torch")
    t = client.create("dev/torch", (3,), "int16", device=torch.device("cpu"))
    assert t.device == "cpu"
    t.abort()


def test_pinned_get_raises_and_releases_its_lease(client):
    reason = no_gpu_reason(client)
    client.put("pin/x", np.arange(6, dtype=np.float64))
    with pytest.raises(tensorbroker.FailedPrecondition) as info:
        client.get("pin/x", timeout=0, pinned=True)
    assert str(info.value).startswith("pinned: ")
    assert reason.split(": ", 1)[1] in str(info.value)  # the same probe's words
    assert client.stat("pin/x")["leases"] == 0
    assert tensorbroker.process_mappings()["pinned_segments"] == 0
    with pytest.raises(tensorbroker.FailedPrecondition):
        client.create("pin/y", (2,), "int8", pinned=True)
    assert client.stats()["pending"] == 0
    plain = client.get("pin/x", timeout=0)
    assert plain.device == "cpu" and not plain.pinned
    assert np.asarray(plain).tolist() == [0, 1, 2, 3, 4, 5]


def test_dlpack_stream_rules_for_cpu_tensors(client):
    client.put("cpu/s", np.arange(3, dtype=np.int32))
    t = client.get("cpu/s", timeout=0)
    assert t.__dlpack_device__() == (1, 0)
    t.__dlpack__(stream=None)
    t.__dlpack__(stream=-1)  # "no synchronisation" is always fine
    with pytest.raises(BufferError, match="stream must be None"):
        t.__dlpack__(stream=5)
    with pytest.raises(BufferError, match="dl_device"):
        t.__dlpack__(dl_device=(2, 0))
    assert t.__dlpack__(dl_device=(1, 0)) is not None


def test_seal_stream_is_validated_and_only_concerns_cuda_tensors(client):
    t = client.create("cpu/seal", (2,), "uint8")
    with pytest.raises(tensorbroker.InvalidArgument, match="stream"):
        t.seal(stream="default")
    with pytest.raises(tensorbroker.InvalidArgument, match="stream"):
        t.seal(stream=-3)
    t.seal(stream=12345)  # a CPU tensor never touches CUDA
    assert t.sealed


def test_stats_list_pools_and_process_mappings(client):
    stats = client.stats()
    assert stats["pools"][0]["device"] == "cpu"
    assert set(stats["pools"][0]) == {"device", "handles", "capacity_bytes", "used_bytes",
                                      "reserved_bytes", "segments"}
    assert stats["pools"][0]["handles"] == "memfd"
    assert stats["pools"][0]["capacity_bytes"] == stats["capacity_bytes"]
    assert all(p["device"].startswith("cuda:") for p in stats["pools"][1:])
    client.put("cpu/m", np.ones(10, np.float32))
    held = client.get("cpu/m", timeout=0)
    mappings = tensorbroker.process_mappings()
    assert set(mappings) == {"cached_segments", "open_cuda_slabs", "cached_cuda_slabs",
                             "pinned_segments"}
    assert mappings["cached_segments"] >= 1
    assert mappings["open_cuda_slabs"] == 0
    held.release()


def test_get_on_another_device_raises_naming_where_it_is(client):
    client.put("where/x", np.arange(2, dtype=np.int64))
    with pytest.raises(tensorbroker.FailedPrecondition) as info:
        client.get("where/x", timeout=0, device="cuda:0")
    assert str(info.value) == ("device: tensor 'where/x' is on cpu, not cuda:0 (Get does not "
                               "copy; Put a copy on the device you need)")
    assert client.stat("where/x")["leases"] == 0
    assert client.get("where/x", timeout=0, device="cpu").numpy().tolist() == [0, 1]
    with pytest.raises(tensorbroker.InvalidArgument):
        client.get("where/x", timeout=0, device="gpu")
