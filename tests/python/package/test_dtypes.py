"""dtypes, layouts and sizes through the broker, producer here and consumers in peer processes:
every dtype NumPy 1.24 and PyTorch 1.13 take through DLPack round-trips bit-exactly; bool (which
neither takes through DLPack) round-trips and has a zero-copy way into both; non-contiguous
sources, 0-d and zero-size tensors, and a 1 GiB tensor."""

import hashlib

import numpy as np
import pytest
import torch

import tensorbroker

NUMPY_DLPACK_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                       "float16", "float32", "float64", "complex64", "complex128"]
TORCH_DLPACK_DTYPES = ["uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16",
                       "float32", "float64", "complex32", "complex64", "complex128"]
SHAPE = (7, 33)


def random_bytes(nbytes, seed):
    return np.random.default_rng(seed).integers(0, 256, size=nbytes, dtype=np.uint8)


def sha(data):
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def client(shared_client):
    """The module's daemon, which its consumer serves (a peer with torch starts once per
    module); what the tests here check of it is per name."""
    return shared_client


@pytest.fixture
def consumer(kept_peers):
    p = kept_peers("consumer")
    yield p
    p.release_all()


def test_the_dtype_lists_are_what_the_frameworks_really_take():
    # Guards the lists above: each framework exports (and so imports) exactly these.
    for name in NUMPY_DLPACK_DTYPES:
        np.zeros(2, name).__dlpack__()
    with pytest.raises(BufferError):
        np.zeros(2, bool).__dlpack__()
    for name in TORCH_DLPACK_DTYPES:
        torch.utils.dlpack.to_dlpack(torch.zeros(2, dtype=getattr(torch, name)))
    with pytest.raises(RuntimeError, match="Bool type is not supported"):
        torch.utils.dlpack.to_dlpack(torch.zeros(2, dtype=torch.bool))


@pytest.mark.parametrize("dtype", NUMPY_DLPACK_DTYPES)
def test_numpy_dtypes_round_trip_exactly(client, consumer, dtype):
    x = random_bytes(int(np.prod(SHAPE)) * np.dtype(dtype).itemsize, hash(dtype) & 0xFFFF)
    x = x.view(dtype).reshape(SHAPE)  # every bit pattern, NaN payloads included
    name = f"dt/np/{dtype}"
    assert client.put(name, x)["dtype"] == dtype
    frameworks = ["numpy", "numpy_dlpack"] + (["torch"] if dtype in TORCH_DLPACK_DTYPES else [])
    for framework in frameworks:
        got = consumer.ask("get", name=name, key=framework, framework=framework)
        assert got["sha256"] == sha(x.tobytes()), framework
        assert got["shape"] == list(SHAPE)
        assert got["dtype"] == (dtype if framework != "torch" else f"torch.{dtype}")
        consumer.ask("release", key=framework)
    client.delete(name)


@pytest.mark.parametrize("dtype", TORCH_DLPACK_DTYPES)
def test_torch_dtypes_round_trip_exactly(client, consumer, dtype):
    torch_dtype = getattr(torch, dtype)
    itemsize = torch.zeros(1, dtype=torch_dtype).element_size()
    raw = random_bytes(int(np.prod(SHAPE)) * itemsize, 7 + len(dtype))
    x = torch.from_numpy(raw).view(torch_dtype).reshape(SHAPE)
    name = f"dt/torch/{dtype}"
    assert client.put(name, x)["dtype"] == dtype
    got = consumer.ask("get", name=name, key="t", framework="torch")
    assert got["sha256"] == sha(raw.tobytes())
    assert got["dtype"] == str(torch_dtype)
    consumer.ask("release", key="t")
    if dtype in NUMPY_DLPACK_DTYPES:
        got = consumer.ask("get", name=name, key="n", framework="numpy")
        assert got["sha256"] == sha(raw.tobytes()) and got["dtype"] == dtype
        consumer.ask("release", key="n")
    client.delete(name)


@pytest.mark.parametrize("producer", ["numpy", "torch"])
def test_bool_round_trips_and_reaches_both_frameworks_without_a_copy(client, consumer, producer):
    mask = np.random.default_rng(5).integers(0, 2, size=SHAPE).astype(bool)
    name = f"dt/bool/{producer}"
    info = client.put(name, mask if producer == "numpy" else torch.from_numpy(mask))
    assert info["dtype"] == "bool"
    # Neither framework takes kDLBool (code 6) through DLPack ...
    with pytest.raises(AssertionError, match="(?i)dlpack|bool|unsupported"):
        consumer.ask("get", name=name, key="x", framework="numpy_dlpack")
    with pytest.raises(AssertionError, match="(?i)dlpack|bool|unsupported"):
        consumer.ask("get", name=name, key="x", framework="torch")
    # ... the documented ways: np.asarray(t) (bool directly) and t.torch() (a uint8 view
    # re-typed to torch.bool), both over the broker's own pages.
    as_numpy = consumer.ask("get", name=name, key="n", framework="numpy")
    as_torch = consumer.ask("get", name=name, key="t", framework="torch_bool")
    assert as_numpy["dtype"] == "bool" and as_torch["dtype"] == "torch.bool"
    assert as_numpy["sha256"] == as_torch["sha256"] == sha(mask.tobytes())
    where_n = consumer.ask("locate", key="n")
    where_t = consumer.ask("locate", key="t")
    assert where_n["file"].startswith("/memfd:tb-")
    assert (where_n["file"], where_n["offset"]) == (where_t["file"], where_t["offset"])
    consumer.ask("release", key="n")
    consumer.ask("release", key="t")
    client.delete(name)


def test_view_reinterprets_bytes_of_the_same_item_size(client):
    client.put("dt/view", np.array([1.0, -2.0], np.float32))
    with client.get("dt/view", timeout=0) as t:
        bits = t.view("uint32")
        assert bits.dtype == "uint32" and bits.shape == (2,)
        assert np.asarray(bits).tolist() == [0x3F800000, 0xC0000000]
        assert np.asarray(bits).ctypes.data == np.asarray(t).ctypes.data
        with pytest.raises(tensorbroker.InvalidArgument, match="item size"):
            t.view("float64")
        bits.release()


def make_noncontiguous():
    base = np.arange(6 * 8, dtype=np.float32).reshape(6, 8)
    cube = torch.arange(2 * 3 * 4, dtype=torch.int64).reshape(2, 3, 4)
    return {
        "np-every-other": base[::2, ::2],
        "np-transpose": base.T,
        "np-negative-rows": base[::-1],
        "np-negative-cols-step3": base[:, ::-3],
        "torch-transpose": torch.from_numpy(base).t(),
        "torch-columns": torch.from_numpy(base)[:, ::2],
        "torch-permute": cube.permute(2, 0, 1),
    }


@pytest.mark.parametrize("case", list(make_noncontiguous()))
def test_noncontiguous_sources_put_correctly(client, consumer, case):
    source = make_noncontiguous()[case]
    expected = np.ascontiguousarray(np.asarray(source))
    name = f"layout/{case}"
    info = client.put(name, source)
    assert info["shape"] == list(expected.shape)
    assert info["strides"] == [s // expected.itemsize for s in expected.strides]  # compact
    for framework in ["numpy", "torch"]:
        got = consumer.ask("get", name=name, key=framework, framework=framework)
        assert got["sha256"] == sha(expected.tobytes()), framework
        assert got["shape"] == list(expected.shape)
        consumer.ask("release", key=framework)
    client.delete(name)


@pytest.mark.parametrize("case", ["np-0d", "torch-0d", "np-zero-size", "torch-zero-size"])
def test_zero_dimensional_and_zero_size(client, consumer, case):
    source = {
        "np-0d": np.array(3.5, np.float32),
        "torch-0d": torch.tensor(-7, dtype=torch.int64),
        "np-zero-size": np.zeros((0, 5), np.float64),
        "torch-zero-size": torch.zeros((3, 0), dtype=torch.float32),
    }[case]
    expected = np.asarray(source)
    name = f"edge/{case}"
    info = client.put(name, source)
    assert info["shape"] == list(expected.shape)
    for framework in ["numpy", "torch"]:
        got = consumer.ask("get", name=name, key=framework, framework=framework)
        assert got["shape"] == list(expected.shape)
        assert got["sha256"] == sha(expected.tobytes())
        consumer.ask("release", key=framework)
    with client.get(name, timeout=0) as t:
        assert t.shape == expected.shape
        assert np.array_equal(np.asarray(t), expected)
    client.delete(name)


def test_buffer_protocol_sources(client, consumer):
    import array

    client.put("buf/array", array.array("d", [1.5, 2.5, 3.5]))
    client.put("buf/bytes", b"\x01\x02\x03")
    client.put("buf/readonly-numpy", np.frombuffer(b"\x00\x00\x80\x3f", np.float32))
    assert client.stat("buf/array")["dtype"] == "float64"
    assert client.stat("buf/bytes")["dtype"] == "uint8"
    got = consumer.ask("get", name="buf/array", framework="numpy")
    assert got["sha256"] == sha(np.array([1.5, 2.5, 3.5]).tobytes())
    got = consumer.ask("get", name="buf/readonly-numpy", framework="numpy")
    assert got["sha256"] == sha(np.array([1.0], np.float32).tobytes())
    with pytest.raises(TypeError, match="__dlpack__"):
        client.put("buf/nothing", object())


def test_one_gib_tensor(daemon, peers):
    """On a daemon of its own (conftest's `daemon`, not the module's), so that its memory
    figure is this test's alone."""
    consumer = peers()
    with tensorbroker.connect(daemon.socket) as client:
        one_gib_round_trip(client, consumer)


def one_gib_round_trip(client, consumer):
    n = (1 << 30) // 4
    x = np.arange(n, dtype=np.uint32)
    x *= np.uint32(2654435761)  # every word differs from its neighbours
    x = x.view(np.int32)        # a dtype torch 1.13 takes too
    info = client.put("big/1g", x)
    assert info["nbytes"] == 1 << 30
    expected = sha(x.data)
    got = consumer.ask("get", name="big/1g", key="t", framework="torch")
    assert got["sha256"] == expected and got["shape"] == [n]
    got = consumer.ask("get", name="big/1g", key="n", framework="numpy")
    assert got["sha256"] == expected
    consumer.ask("release", key="t")
    consumer.ask("release", key="n")
    client.delete("big/1g")
    assert client.stats()["used_bytes"] == 0  # all of it freed
