"""A broker that lies, for the tests of what a broker believes of its origins: a gRPC server
with a certificate the test CA signed (so it passes mutual TLS as a real broker would) that
answers Ping, Stat, Read and Watch as its test scripts it. It serves `tensors` (name -> bytes)
honestly, or:
  - announces more bytes than it has (`announce`: name -> shape it claims),
  - drips a tensor's bytes (`drip`: one byte per `drip_interval` seconds, forever),
  - sends `watch_events` on every Watch stream, then keeps the stream open.
It counts the Read streams open now and the most ever open at once (per tensor name prefix
before the first '/', so one server may stand for one origin of several names)."""

import threading
import time
from concurrent import futures

import grpc

from tensorbroker.v1 import broker_pb2 as pb
from tensorbroker.v1 import broker_pb2_grpc as pb_grpc

UINT8 = pb.DataType(code=1, bits=8, lanes=1)


def info_of(name, size, version=7):
    return pb.TensorInfo(name=name, dtype=UINT8, shape=[size], strides=[1], nbytes=size,
                         device=pb.Device(device_type=1, device_id=0), sealed=True,
                         version=version, owner_uid=0, readers=["*"], keep=1)


class HostileOrigin(pb_grpc.BrokerServicer):
    def __init__(self, pki, identity, tensors=None, announce=None, drip=(),
                 drip_interval=0.2, watch_events=()):
        self.tensors = dict(tensors or {})
        self.announce = dict(announce or {})
        self.drip = set(drip)
        self.drip_interval = drip_interval
        self.watch_events = list(watch_events)
        self.lock = threading.Lock()
        self.reads_open = 0
        self.most_reads_open = 0
        self.reads_started = 0
        self.watches_started = threading.Event()
        self.stopping = threading.Event()

        def read(name):
            with open(f"{pki}/{name}", "rb") as f:
                return f.read()
        creds = grpc.ssl_server_credentials(
            [(read(identity + ".key"), read(identity + ".crt"))],
            root_certificates=read("ca.crt"), require_client_auth=True)
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=32))
        pb_grpc.add_BrokerServicer_to_server(self, self.server)
        self.port = self.server.add_secure_port("127.0.0.1:0", creds)
        self.server.start()

    def stop(self):
        self.stopping.set()
        self.server.stop(grace=None).wait()

    def size_of(self, name):
        if name in self.announce:
            return self.announce[name]
        return len(self.tensors[name]) if name in self.tensors else None

    def Ping(self, request, context):
        return pb.Empty()

    def Stat(self, request, context):
        size = self.size_of(request.name)
        if size is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no {request.name}")
        return info_of(request.name, size)

    def Read(self, request, context):
        size = self.size_of(request.name)
        if size is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no {request.name}")
        with self.lock:
            self.reads_open += 1
            self.reads_started += 1
            self.most_reads_open = max(self.most_reads_open, self.reads_open)
        try:
            yield pb.ReadResponse(info=info_of(request.name, size))
            if request.name in self.drip:
                while context.is_active() and not self.stopping.is_set():
                    yield pb.ReadResponse(data=b"\x01")
                    time.sleep(self.drip_interval)
                return
            data = self.tensors.get(request.name, b"")
            for at in range(0, len(data), 1 << 20):
                yield pb.ReadResponse(data=data[at:at + (1 << 20)])
        finally:
            with self.lock:
                self.reads_open -= 1

    def Watch(self, request, context):
        context.send_initial_metadata(())
        self.watches_started.set()
        for event in self.watch_events:
            yield event
        while context.is_active() and not self.stopping.is_set():
            time.sleep(0.05)

    def open_reads(self):
        with self.lock:
            return self.reads_open
