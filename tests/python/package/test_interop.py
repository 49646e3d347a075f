"""NumPy and PyTorch exchange across processes, the seed's matrix: numpy -> numpy,
numpy -> torch, torch -> numpy, torch -> torch with a 100x10000 float32 tensor, ten rounds each.
The producer is this process; every consumer is a peer process (peer.py)."""

import hashlib
import signal
import time

import numpy as np
import pytest
import torch

import tensorbroker

SHAPE = (100, 10000)
ROUNDS = 10
FRAMEWORKS = ["numpy", "torch"]


def produce(framework, array):
    return array if framework == "numpy" else torch.from_numpy(array)


@pytest.fixture
def two_consumers(kept_peers):
    """Two peers on the module's daemon (shared_daemon), started once for the four matrix
    tests; each test leaves them holding nothing, failed or not."""
    a, b = kept_peers("a"), kept_peers("b")
    yield a, b
    try:
        a.release_all()
    finally:
        b.release_all()


@pytest.mark.parametrize("producer", FRAMEWORKS)
@pytest.mark.parametrize("consumer", FRAMEWORKS)
def test_matrix_ten_rounds_equal_bytes_and_same_pages(shared_client, two_consumers, producer,
                                                      consumer):
    client = shared_client  # the daemon two_consumers are on
    a, b = two_consumers
    for round_ in range(ROUNDS):
        rng = np.random.default_rng(round_ + 100 * FRAMEWORKS.index(producer))
        x = rng.standard_normal(SHAPE, dtype=np.float32)
        name = f"matrix/{producer}-{consumer}/{round_}"
        info = client.put(name, produce(producer, x))
        assert info["shape"] == list(SHAPE) and info["dtype"] == "float32"
        expected = hashlib.sha256(x.tobytes()).hexdigest()
        got_a = a.ask("get", name=name, framework=consumer)
        got_b = b.ask("get", name=name, framework=consumer)
        assert got_a["sha256"] == expected
        assert got_b["sha256"] == expected
        assert got_a["shape"] == list(SHAPE)
        # Two consumers, two processes: the very same page of the same shared-memory file.
        where_a = a.ask("locate", name=name)
        where_b = b.ask("locate", name=name)
        assert where_a["file"].startswith("/memfd:tb-"), where_a
        assert (where_a["file"], where_a["offset"]) == (where_b["file"], where_b["offset"])
        assert client.stat(name)["leases"] == 2
        a.ask("release", name=name)
        b.ask("release", name=name)
        assert client.stat(name)["leases"] == 0
        client.delete(name)


@pytest.mark.parametrize("framework_a,framework_b",
                         [("numpy", "numpy"), ("numpy", "torch"), ("torch", "numpy"),
                          ("torch", "torch")])
def test_mutable_tensor_writes_are_seen_both_ways(client, peers, framework_a, framework_b):
    name = f"mutable/{framework_a}-{framework_b}"
    client.put(name, np.zeros(SHAPE, np.float32), mutable=True)
    a, b = peers(), peers()
    a.ask("get", name=name, framework=framework_a)
    b.ask("get", name=name, framework=framework_b)
    a.ask("write", name=name, index=[1, 0], value=1.0)  # y[1, 0] = 1.0 in process a
    assert b.ask("read", name=name, index=[1, 0])["value"] == 1.0
    b.ask("write", name=name, index=[2, 5], value=-3.5)  # and back, from process b
    assert a.ask("read", name=name, index=[2, 5])["value"] == -3.5
    with client.get(name, timeout=0) as t:
        seen = np.asarray(t)
        assert seen[1, 0] == 1.0 and seen[2, 5] == -3.5 and seen.flags.writeable


def test_sealed_tensor_numpy_view_is_read_only(client, peers):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    client.put("sealed/np", x)
    p = peers()
    p.ask("get", name="sealed/np", framework="numpy")
    assert p.ask("writeable", name="sealed/np") == {"writeable": False}
    p.ask("get", name="sealed/np", key="dl", framework="numpy_dlpack")
    assert p.ask("writeable", key="dl") == {"writeable": False}
    # numpy refuses the write with "assignment destination is read-only"; nothing changes.
    with pytest.raises(AssertionError, match="ValueError: assignment destination is read-only"):
        p.ask("write", name="sealed/np", index=[1, 0], value=1.0)
    with client.get("sealed/np", timeout=0) as t:
        assert np.array_equal(np.asarray(t), x)


def test_torch_write_into_sealed_tensor_faults_and_leaves_broker_copy_intact(client, peers):
    # torch has no read-only tensors: the page is mapped read-only, so the writing process gets
    # SIGSEGV (documented in docs/python.md) and nobody else sees a change.
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    client.put("sealed/torch", x)
    writer = peers(sanitizer_options="handle_segv=0")  # the plain SIGSEGV, also under ASan
    writer.ask("get", name="sealed/torch", framework="torch")
    where = writer.ask("locate", name="sealed/torch")
    assert where["perms"].startswith("r-"), where
    writer.send("write", name="sealed/torch", index=[1, 0], value=1.0)
    assert writer.wait() == -signal.SIGSEGV
    reader = peers()
    got = reader.ask("get", name="sealed/torch", framework="torch")
    assert got["sha256"] == hashlib.sha256(x.tobytes()).hexdigest()


def test_dlpack_versions_and_capsule_leases(client):
    client.put("caps/a", np.arange(6, dtype=np.int32))
    t = client.get("caps/a", timeout=0)
    legacy = t.__dlpack__()
    versioned = t.__dlpack__(max_version=(1, 0))
    old_max = t.__dlpack__(max_version=(0, 8))
    assert "dltensor" in repr(legacy) and "versioned" not in repr(legacy)
    assert '"dltensor_versioned"' in repr(versioned)
    assert "versioned" not in repr(old_max)
    assert t.__dlpack_device__() == (1, 0)
    assert client.stat("caps/a")["leases"] == 1  # t and three capsules share one lease
    del legacy, versioned, old_max                # unconsumed capsules let go on collection
    assert client.stat("caps/a")["leases"] == 1  # t still holds it
    with pytest.raises(BufferError):
        t.__dlpack__(stream=1)
    with pytest.raises(BufferError):
        t.__dlpack__(dl_device=(2, 0))
    assert "dltensor" in repr(t.__dlpack__(copy=False))  # shared pages (copy=True: below)
    t.release()
    with pytest.raises(tensorbroker.FailedPrecondition, match="released"):
        t.__dlpack__()
    assert client.stat("caps/a")["leases"] == 0


def test_views_outlive_their_tensor_object(client):
    before = client.stats()
    client.put("outlive/a", np.arange(5, dtype=np.float64))
    t = client.get("outlive/a", timeout=0)
    a, b = np.asarray(t), torch.from_dlpack(t)
    t.release()
    del t
    client.delete("outlive/a")
    assert a.tolist() == [0, 1, 2, 3, 4] and b.tolist() == [0, 1, 2, 3, 4]
    assert client.stats()["leases"] == before["leases"] + 1  # the views share one lease
    del a, b
    after = client.stats()
    assert after["leases"] == before["leases"]
    assert after["used_bytes"] == before["used_bytes"]  # freed with the last lease


def test_views_of_a_closed_client_end_its_session_when_the_last_goes(daemon, client):
    # A get()'s lease is let go of with the GIL kept while its client is open (a store or a
    # queued release); once the client is closed, the last view's drop ends the session (a
    # round trip, without the GIL). Both kinds of view, dropped in turn.
    client.put("closed/a", np.arange(6, dtype=np.int32))
    other = tensorbroker.connect(daemon.socket)
    t = other.get("closed/a", timeout=0)
    capsule_view, array_view = np.from_dlpack(t), np.asarray(t)
    t.release()
    del t
    other.close()
    assert client.stats()["clients"] == 2, "the views keep the closed client's session"
    assert capsule_view.tolist() == array_view.tolist() == [0, 1, 2, 3, 4, 5]
    del capsule_view
    assert client.stats()["clients"] == 2 and client.stat("closed/a")["leases"] == 1
    del array_view
    # The client's end closes its connection; the daemon ends the session when it sees that.
    deadline = time.monotonic() + 60
    while client.stats()["clients"] != 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert client.stats()["clients"] == 1, "the last view ended the session"
    assert client.stat("closed/a")["leases"] == 0


def test_numpy_arrays_come_from_numpys_python_api_not_its_c_api(client):
    # NumPy's C API changed its structures in NumPy 2 (the dtype's item size moved): an extension
    # built against one would make wrong strides with the other. The array is numpy.ndarray over
    # a buffer that owns the lease, so no NumPy C API is compiled in.
    with open(tensorbroker._core.__file__, "rb") as so:
        assert b"_ARRAY_API" not in so.read()
    client.put("noapi/a", np.arange(24, dtype=np.int16).reshape(2, 3, 4))
    t = client.get("noapi/a", timeout=0)
    a = np.asarray(t)
    assert type(a.base).__name__ == "_LeaseBytes"
    assert a.shape == (2, 3, 4) and a.strides == (24, 8, 2) and a.dtype == np.int16
    assert not a.flags.writeable and a[1, 2, 3] == 23
    assert memoryview(a.base).readonly and memoryview(a.base).nbytes == 48
    t.release()
    del t
    leases = client.stat("noapi/a")["leases"]
    assert leases == 1  # the array's
    del a
    assert client.stat("noapi/a")["leases"] == 0
    client.delete("noapi/a")
    # A 0-d and an empty tensor.
    client.put("noapi/scalar", np.float32(2.5).reshape(()))
    client.put("noapi/empty", np.zeros((3, 0), np.float32))
    with client.get("noapi/scalar", timeout=0) as s, client.get("noapi/empty", timeout=0) as e:
        assert np.asarray(s).shape == () and float(np.asarray(s)) == 2.5
        assert np.asarray(e).shape == (3, 0)
    client.delete("noapi/scalar")
    client.delete("noapi/empty")


def test_dlpack_copy_true_hands_a_private_writable_copy_and_no_lease(client):
    client.put("copy/a", np.arange(6, dtype=np.float32).reshape(2, 3))
    with client.get("copy/a", timeout=0) as t:
        for max_version in [None, (1, 0)]:
            capsule = t.__dlpack__(copy=True, max_version=max_version)
            assert client.stat("copy/a")["leases"] == 1  # the copy holds none of its own
            name = "dltensor_versioned" if max_version else "dltensor"
            assert f'"{name}"' in repr(capsule)
            del capsule
        # What NumPy 2.1+ asks (np.from_dlpack(x, copy=True)), as it asks it.
        class Asks:
            def __dlpack_device__(self):
                return t.__dlpack_device__()

            def __dlpack__(self, **kwargs):
                return t.__dlpack__(copy=True, **{k: v for k, v in kwargs.items() if k != "copy"})

        b = torch.from_dlpack(Asks())
        b += 100  # writable: its own memory
        assert b.tolist() == [[100, 101, 102], [103, 104, 105]]
        assert np.asarray(t).tolist() == [[0, 1, 2], [3, 4, 5]]  # the broker's copy is intact
        with pytest.raises(BufferError, match="dl_device"):
            t.__dlpack__(dl_device=(2, 0))
    assert client.stat("copy/a")["leases"] == 0
    client.delete("copy/a")
