"""A tensorbrokerd on a private socket for the tests that speak raw gRPC (stubs generated from
broker.proto): started, waited for with Ping (daemon_wait.wait_for: a start that fails quotes
its exit status and log), stopped with a signal. Its stderr is kept in `log_path` and printed by
stop(). The daemon gets SIGTERM if the test process dies, however it dies. RawSession: an open
Session stream, for the calls that need a session id (Get)."""

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading

import grpc

from tensorbroker.v1 import broker_pb2 as pb
from tensorbroker.v1 import broker_pb2_grpc as pbg

from daemon_wait import describe_exit, wait_for

PR_SET_PDEATHSIG = 1
SESSION_GUARD = 300  # seconds a Session stream stays open at most; longer than any test


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
        self.log_path = os.path.join(self.dir, "daemon.log")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [binary, "--socket", self.socket, "--log-level", "warning", *extra_args],
                stderr=log, preexec_fn=dies_with_test())
        self.pid = self.proc.pid
        self.channel = self.stub = None

        def answers_ping():
            # The channel is made once the socket exists: a first try on a path nobody listens
            # on yet would put it in gRPC's reconnect backoff, seconds after the daemon serves.
            if self.channel is None:
                if not os.path.exists(self.socket):
                    return False
                self.channel = grpc.insecure_channel("unix:" + self.socket)
                self.stub = pbg.BrokerStub(self.channel)
            try:
                self.stub.Ping(pb.Empty(), timeout=1)
                return True
            except grpc.RpcError:
                return False
        try:
            wait_for(self.proc, f"serving on {self.socket}", answers_ping, self.log_path,
                     interval=0.02)
        except AssertionError:
            if self.channel is not None:
                self.channel.close()
            self.cleanup()
            raise

    def log(self):
        """What it wrote to its stderr so far."""
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self, sig=signal.SIGTERM, timeout=60):
        """Sends `sig` (if it still runs) and returns its exit status. Prints its log, if it
        wrote one, for whoever reads the test's output."""
        self.channel.close()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout=timeout)
        text = self.log()
        if text:
            sys.stderr.write(f"tensorbrokerd (pid {self.pid}, {describe_exit(code)}) logged:\n"
                             f"{text}")
        return code

    def cleanup(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class RawSession:
    """An open Session stream: a generator sends hello, then blocks until close()."""

    def __init__(self, stub, name="pytest"):
        self._done = threading.Event()

        def requests():
            yield pb.SessionRequest(
                hello=pb.SessionRequest.Hello(pid=os.getpid(), client_name=name))
            # Bounded: a session a failed test never closed must not keep pytest from exiting.
            self._done.wait(SESSION_GUARD)

        self._events = stub.Session(requests())
        first = next(self._events)
        assert first.WhichOneof("event") == "opened"
        self.id = first.opened.session_id
        assert self.id

    def close(self):
        self._done.set()
        self._events.cancel()
