#!/usr/bin/python3
"""Writes the seed inputs of the fuzz targets: tests/fuzz/corpus/<target>/<seed>, and the
hand-made regression inputs: tests/fuzz/regressions/<target>/<what it broke>.

Run from anywhere, with Debian's python3 (numpy and protobuf) and protoc:
    /usr/bin/python3 tests/fuzz/corpus/generate_corpus.py
It rewrites every seed it knows and leaves other files alone. The seeds are committed; run it
again after changing a format (proto/, the frame layout in tests/fuzz/fuzz_support.h).
"""
import io
import os
import pathlib
import struct
import subprocess
import sys
import tempfile

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[2]


def load_protos():
    """The project's messages, compiled with protoc into a temporary package."""
    out = tempfile.mkdtemp(prefix="tb-fuzz-proto-")
    protos = ["tensorbroker/v1/broker.proto", "tensorbroker/v1/local.proto",
              "tensorbroker/v1/state.proto"]
    subprocess.run(["protoc", f"-I{ROOT / 'proto'}", f"--python_out={out}", *protos], check=True)
    sys.path.insert(0, out)
    from tensorbroker.v1 import broker_pb2, local_pb2, state_pb2  # noqa: E402
    return broker_pb2, local_pb2, state_pb2


def write(target, name, data):
    path = HERE / target / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else data.encode())


def frame(data):
    """One frame of tests/fuzz/fuzz_support.h's FrameReader."""
    assert len(data) < 1 << 16
    return struct.pack("<H", len(data)) + data


def npy(array, version=None):
    out = io.BytesIO()
    if version is None:
        np.save(out, array)
    else:
        np.lib.format.write_array(out, array, version=version)
    return out.getvalue()


def npy_seeds():
    seeds = {
        "float32-2x3": npy(np.arange(6, dtype="<f4").reshape(2, 3)),
        "int64-fortran-3x2": npy(np.asfortranarray(np.arange(6, dtype="<i8").reshape(3, 2))),
        "bool-5": npy(np.array([True, False, True, True, False])),
        "uint8-scalar": npy(np.array(7, dtype="u1")),
        "complex128-2": npy(np.array([1 + 2j, 3 - 4j], dtype="<c16")),
        "float16-empty-0x5": npy(np.zeros((0, 5), dtype="<f2")),
        "int16-v2-2x2x2": npy(np.arange(8, dtype="<i2").reshape(2, 2, 2), version=(2, 0)),
        "uint32-v3-4": npy(np.arange(4, dtype="<u4"), version=(3, 0)),
        "float64-fortran-2x2x3": npy(np.asfortranarray(np.ones((2, 2, 3), dtype="<f8"))),
        "complex64-1x1": npy(np.array([[1j]], dtype="<c8")),
    }
    for name, data in seeds.items():
        write("npy_file", name, data)
        write("npy_header", name, data)
    # Headers alone, as written by older NumPy (Python 2 longs, no trailing comma space).
    legacy = b"{'descr': '<i4', 'fortran_order': False, 'shape': (2L, 3L), }"
    legacy += b" " * (64 - 10 - len(legacy) - 1) + b"\n"
    write("npy_header", "int32-legacy-long", b"\x93NUMPY\x01\x00" + struct.pack("<H", len(legacy))
          + legacy)


def config_seeds():
    write("config_file", "deploy-example", (ROOT / "deploy" / "tensorbrokerd.conf").read_text())
    write("config_file", "every-key", """\
# every key the daemon knows
socket = /run/tensorbroker/broker.sock
capacity = 4G
cuda-capacity = 0
log-level = debug
metrics-listen = 127.0.0.1:9464
admin-group = root
default-readers = uid:1000,gid:27,user:root,group:root
readers[team-a/] = group:root
publishers[team-a/] = uid:0
quota-bytes = 8GiB
quota-tensors = 10000
quota-bytes[root] = 32G
quota-tensors[uid:1000] = 5
pending-timeout = 1m30s
handshake-timeout = 500ms
max-connections = 4096
""")
    write("config_file", "spacing", "  capacity=512M  # trailing comment\n\n\tlog-level =warning\n"
          "metrics-listen = [::1]:9464\r\n")


def metrics_seeds():
    scrape = ("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:9464\r\nUser-Agent: Prometheus/2.45.0\r\n"
              "Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5\r\n"
              "Accept-Encoding: gzip\r\nX-Prometheus-Scrape-Timeout-Seconds: 10\r\n\r\n")
    seeds = {
        "prometheus-scrape": b"\x00" + scrape.encode(),
        "prometheus-scrape-bytewise": b"\x01" + scrape.encode(),
        "curl-head": b"\x00HEAD /metrics HTTP/1.1\r\nHost: localhost\r\nUser-Agent: curl/7.88.1\r\n"
                     b"Accept: */*\r\n\r\n",
        "root-http10": b"\x07GET / HTTP/1.0\n\n",
        "query-string": b"\x00GET /metrics?name[]=tensorbroker_up HTTP/1.1\r\n\r\n",
        "not-found": b"\x10GET /favicon.ico HTTP/1.1\r\nHost: x\r\n\r\n",
        "post": b"\x00POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
        "malformed": b"\x00hello\r\n\r\n",
    }
    for name, data in seeds.items():
        write("metrics_request", name, data)


def proto_seeds(broker):
    f32 = broker.DataType(code=2, bits=32, lanes=1)
    cpu = broker.Device(device_type=1, device_id=0)
    creates = {
        "create-float32-2x3": broker.CreateRequest(name="model/weights", dtype=f32, shape=[2, 3]),
        "create-strided-nbytes": broker.CreateRequest(
            name="a.b_c-d", dtype=broker.DataType(code=0, bits=16, lanes=1), shape=[3, 4],
            strides=[8, 1], nbytes=64, mutable=True, replace=True, device=cpu),
        "create-readers": broker.CreateRequest(
            name="team/x", dtype=broker.DataType(code=4, bits=16, lanes=1), shape=[5],
            readers=["uid:1000", "gid:27", "user:root"]),
        "create-float8-empty": broker.CreateRequest(
            name="locked/f8", dtype=broker.DataType(code=7, bits=8, lanes=1), shape=[0, 9]),
        "create-scalar-bool": broker.CreateRequest(
            name="flag", dtype=broker.DataType(code=6, bits=8, lanes=1), session_id="s"),
    }
    for name, message in creates.items():
        write("proto_request", name, b"\x00" + message.SerializeToString())
    header = broker.PutRequest.Header
    puts = {
        "put-int64-4x4": header(name="put/me", dtype=broker.DataType(code=0, bits=64, lanes=1),
                                shape=[4, 4]),
        "put-complex-readers": header(name="team/c", dtype=broker.DataType(code=5, bits=64, lanes=1),
                                      shape=[2], mutable=True, replace=True, device=cpu,
                                      readers=["*"]),
    }
    for name, message in puts.items():
        write("proto_request", name, b"\x01" + broker.PutRequest(header=message).SerializeToString())
    return creates


def local_seeds(broker, local):
    L = local.LocalRequest
    f32 = broker.DataType(code=2, bits=32, lanes=1)

    def datagrams(*requests, with_fd=()):
        return b"".join(frame((b"\x01" if i in with_fd else b"\x00") + r.SerializeToString())
                        for i, r in enumerate(requests))

    hello = broker.SessionRequest.Hello(pid=42, client_name="fuzz")
    open_ = L(request_id=1, open=L.Open(hello=hello))
    seeds = {
        "create-seal-get-release": b"\x00" + datagrams(
            open_,
            L(request_id=2, create=broker.CreateRequest(name="t", dtype=f32, shape=[4])),
            L(request_id=3, seal=broker.SealRequest(name="t")),
            L(request_id=4, get=broker.GetRequest(name="t")),
            L(request_id=0, release_lease_ids=[1, 2]),
            L(request_id=5)),
        "wait-then-publish": b"\x00" + datagrams(
            open_,
            L(request_id=2, get=broker.GetRequest(name="w", wait_ms=1000)),
            L(request_id=3, create=broker.CreateRequest(name="w", dtype=f32, shape=[64, 64])),
            L(request_id=4, seal=broker.SealRequest(name="w")),
            L(request_id=5, fetch_segment=L.FetchSegment(lease_id=1))),
        "mutable-retain-abort": b"\x00" + datagrams(
            open_,
            L(request_id=2, create=broker.CreateRequest(name="m", dtype=f32, shape=[8],
                                                        mutable=True, readers=["*"])),
            L(request_id=3, retain=broker.RetainRequest(lease_id=1)),
            L(request_id=4, abort=broker.AbortRequest(name="m")),
            L(request_id=5, dropped_segments=["tb-fuzz-0"], release_lease_ids=[2])),
        "replace-removes-segment": b"\x00" + datagrams(
            open_,
            L(request_id=2, create=broker.CreateRequest(name="r", dtype=f32, shape=[16384])),
            L(request_id=3, seal=broker.SealRequest(name="r")),
            L(request_id=4, create=broker.CreateRequest(name="r", dtype=f32, shape=[16384],
                                                        replace=True)),
            L(request_id=5, seal=broker.SealRequest(name="r")),
            L(request_id=0, release_lease_ids=[1, 2])),
        "other-user-team": b"\x01" + datagrams(
            open_,
            L(request_id=2, create=broker.CreateRequest(name="team/t", dtype=f32, shape=[2])),
            L(request_id=3, create=broker.CreateRequest(name="locked/t", dtype=f32, shape=[2])),
            L(request_id=4, attach=L.Attach(session_id="nope"))),
        "watch-stream-then-cancel": b"\x00" + datagrams(
            open_,
            L(request_id=2, watch=broker.WatchRequest(prefix="s/")),
            L(request_id=3, create=broker.CreateRequest(name="s/a", dtype=f32, shape=[4],
                                                        keep=3)),
            L(request_id=4, seal=broker.SealRequest(name="s/a")),
            L(request_id=5, create=broker.CreateRequest(name="s/a", dtype=f32, shape=[4],
                                                        replace=True, keep=3)),
            L(request_id=6, seal=broker.SealRequest(name="s/a")),
            L(request_id=7, get=broker.GetRequest(name="s/a", after_version=1, oldest=True)),
            L(request_id=0, cancel=L.Cancel(request_id=2))),
        "watch-resume-and-follow": b"\x00" + datagrams(
            open_,
            L(request_id=2, watch=broker.WatchRequest(prefix="", after_version=1)),
            L(request_id=3, get=broker.GetRequest(name="f", wait_ms=1000, after_version=0)),
            L(request_id=4, create=broker.CreateRequest(name="f", dtype=f32, shape=[2])),
            L(request_id=5, seal=broker.SealRequest(name="f")),
            L(request_id=6, get=broker.GetRequest(name="f", version=1)),
            L(request_id=7, watch=broker.WatchRequest(prefix="f"))),
        "takeover": b"\x00" + datagrams(L(request_id=9, takeover=L.Takeover())),
        "descriptor-refused": b"\x00" + datagrams(open_, L(request_id=2), with_fd=(1,)),
        "no-session": b"\x00" + datagrams(
            L(request_id=1, get=broker.GetRequest(name="x")),
            L(request_id=2, seal=broker.SealRequest(name="x"))),
    }
    for name, data in seeds.items():
        write("local_channel", name, data)


def record_seeds(broker, state):
    f32 = broker.DataType(code=2, bits=32, lanes=1)

    def record(name, version, segment, offset, block_size, shape, **info):
        nbytes = 4
        for d in shape:
            nbytes *= d
        strides = []
        step = 1
        for d in reversed(shape):
            strides.insert(0, step)
            step *= d
        return state.TensorRecord(
            format=1, publisher_uid=0, segment=segment, offset=offset, block_size=block_size,
            info=broker.TensorInfo(name=name, dtype=f32, shape=shape, strides=strides,
                                   nbytes=nbytes, sealed=True, version=version, owner_uid=0,
                                   readers=info.pop("readers", ["*"]), created_unix_ms=1, **info))

    records = {
        "float32-4-old0": record("t", 7, "tb-old-0", 0, 256, [4]),
        "float32-2x8-old1": record("team/u", 3, "tb-old-1", 4096, 256, [2, 8],
                                   readers=["uid:1000"]),
        "mutable-dedicated": record("m", 9, "tb-old-1", 0, 16384, [1024], mutable=True),
        "large-old0": record("big", 11, "tb-old-0", 0, 65536, [128, 128]),
    }
    for name, message in records.items():
        write("tensor_record", name, message.SerializeToString())

    def descriptor(kind, name, content=b""):
        name = name.encode()
        return frame(bytes([kind, len(name)]) + name + content)

    r = {k: v.SerializeToString() for k, v in records.items()}
    newer = record("t", 8, "tb-old-0", 256, 256, [4]).SerializeToString()
    seeds = {
        "two-segments-two-records": descriptor(1, "s-tb-old-0") + descriptor(5, "s-tb-old-1")
        + descriptor(0, "r-7", r["float32-4-old0"]) + descriptor(0, "r-3", r["float32-2x8-old1"]),
        "versions-of-one-name": descriptor(1, "s-tb-old-0") + descriptor(0, "r-7",
                                                                         r["float32-4-old0"])
        + descriptor(0, "r-8", newer),
        "sockets-and-strays": descriptor(3, "socket") + descriptor(1, "s-tb-old-0")
        + descriptor(2, "r-7", r["float32-4-old0"]) + descriptor(0, "unknown")
        + descriptor(0, "r-x", b"junk") + descriptor(3, "lock"),
        "mutable-and-large": descriptor(5, "s-tb-old-1") + descriptor(1, "s-tb-old-0")
        + descriptor(0, "r-9", r["mutable-dedicated"]) + descriptor(0, "r-11", r["large-old0"]),
    }
    for name, data in seeds.items():
        write("adoption", name, data)

    # Names handed over twice (found by adoption_fuzz): dropping the second by name dropped the
    # adopted first one from the descriptor store too, so the tensor was lost at the next start.
    regressions = {
        "segment-name-twice": descriptor(1, "s-tb-old-0") + descriptor(1, "s-tb-old-0")
        + descriptor(0, "r-7", r["float32-4-old0"]),
        "record-name-twice-second-invalid": descriptor(1, "s-tb-old-0")
        + descriptor(0, "r-7", r["float32-4-old0"]) + descriptor(0, "r-7", b"junk"),
        "record-name-twice-first-invalid": descriptor(1, "s-tb-old-0")
        + descriptor(2, "r-7", r["float32-4-old0"]) + descriptor(0, "r-7", r["float32-4-old0"]),
    }
    for name, data in regressions.items():
        path = HERE.parent / "regressions" / "adoption" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def main():
    broker, local, state = load_protos()
    npy_seeds()
    config_seeds()
    metrics_seeds()
    proto_seeds(broker)
    local_seeds(broker, local)
    record_seeds(broker, state)


if __name__ == "__main__":
    main()
