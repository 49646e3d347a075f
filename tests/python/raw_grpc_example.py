import mmap
import os
import socket
import threading

import grpc
import numpy as np
from tensorbroker.v1 import broker_pb2 as pb, broker_pb2_grpc as pbg, local_pb2 as lpb

DTYPES = {(0, 32): np.int32, (0, 64): np.int64, (1, 8): np.uint8, (2, 32): np.float32,
          (2, 64): np.float64}


class RawClient:
    """A zero-copy consumer with only grpcio, numpy and the standard library."""

    def __init__(self, socket_path):
        self.stub = pbg.BrokerStub(grpc.insecure_channel("unix:" + socket_path))
        # The Session stream owns this client's leases; it stays open until close().
        self._closed = threading.Event()

        def hello():
            yield pb.SessionRequest(hello=pb.SessionRequest.Hello(pid=os.getpid()))
            self._closed.wait()

        self._events = self.stub.Session(hello())
        self.session_id = next(self._events).opened.session_id
        # Memory reaches us only as descriptors, on the local channel beside the gRPC socket.
        self._local = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._local.connect(socket_path + ".fd")
        self._call(lpb.LocalRequest(attach=lpb.LocalRequest.Attach(session_id=self.session_id)))

    def _call(self, request):
        request.request_id = 1
        self._local.sendmsg([request.SerializeToString()])
        data, fds, _, _ = socket.recv_fds(self._local, 1 << 16, 1)
        reply = lpb.LocalReply.FromString(data)
        if reply.code != 0:
            raise RuntimeError(f"{grpc.StatusCode(reply.code).name}: {reply.message}")
        return fds

    def get(self, name):
        """(array, lease_id): a read-only NumPy view of the tensor's own pages."""
        grant = self.stub.Get(pb.GetRequest(session_id=self.session_id, name=name), timeout=30)
        fetch = lpb.LocalRequest.FetchSegment(lease_id=grant.lease_id)
        [fd] = self._call(lpb.LocalRequest(fetch_segment=fetch))
        region, info = grant.region, grant.info
        # A read-only descriptor: the kernel refuses PROT_WRITE on it.
        mapping = mmap.mmap(fd, region.segment_size, mmap.MAP_SHARED, mmap.PROT_READ)
        os.close(fd)
        dtype = np.dtype(DTYPES[(info.dtype.code, info.dtype.bits)])
        array = np.ndarray(tuple(info.shape), dtype, buffer=mapping, offset=region.offset,
                           strides=tuple(s * dtype.itemsize for s in info.strides))
        return array, grant.lease_id

    def release(self, lease_id):
        request = pb.ReleaseRequest(session_id=self.session_id, lease_id=lease_id)
        self.stub.Release(request, timeout=30)

    def close(self):
        self._local.close()
        self._closed.set()
        self._events.cancel()
