"""A tensorbrokerd on a private socket for the tests that speak raw gRPC (stubs generated from
broker.proto): started, waited for with Ping, stopped with a signal. The daemon gets SIGTERM if
the test process dies, however it dies."""

import ctypes
import os
import shutil
import signal
import subprocess
import tempfile
import time

import grpc

from tensorbroker.v1 import broker_pb2 as pb
from tensorbroker.v1 import broker_pb2_grpc as pbg

PR_SET_PDEATHSIG = 1
START_GUARD = 30  # seconds; only against hangs, never a measurement


def dies_with_test():
    """preexec_fn: the child gets SIGTERM when this test process dies, however it dies."""
    def arm():
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    return arm


class RawDaemon:
    """$TENSORBROKERD on `<tmpdir>/broker.sock` with `extra_args`; `stub` is a BrokerStub."""

    def __init__(self, *extra_args, prefix="tbpy."):
        binary = os.environ.get("TENSORBROKERD")
        assert binary and os.path.exists(binary), "set TENSORBROKERD to the tensorbrokerd binary"
        self.dir = tempfile.mkdtemp(prefix=prefix)
        self.socket = os.path.join(self.dir, "broker.sock")
        self.proc = subprocess.Popen(
            [binary, "--socket", self.socket, "--log-level", "warning", *extra_args],
            preexec_fn=dies_with_test())
        self.pid = self.proc.pid
        self.channel = grpc.insecure_channel("unix:" + self.socket)
        self.stub = pbg.BrokerStub(self.channel)
        deadline = time.monotonic() + START_GUARD
        while True:
            try:
                self.stub.Ping(pb.Empty(), timeout=1)
                break
            except grpc.RpcError:
                assert self.proc.poll() is None, "tensorbrokerd exited during start-up"
                assert time.monotonic() < deadline, "tensorbrokerd did not answer Ping"
                time.sleep(0.02)

    def stop(self, sig=signal.SIGTERM, timeout=60):
        """Sends `sig` (if it still runs) and returns its exit status."""
        self.channel.close()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=timeout)

    def cleanup(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
