#!/usr/bin/python3
"""What waiting Gets cost the daemon: its threads, descriptors and resident memory with none,
then with WAITERS Gets waiting (spread over CHANNELS connections, for names never published),
then once every one is cancelled; and how long a Ping and a health check take meanwhile.
Figures only, no pass/fail (tests/python/test_hostile_clients.py checks the outcome).

  PYTHONPATH=build/tests/python/generated bench/waiting_gets.py \\
      [--daemon build/daemon/tensorbrokerd] [--cli build/cli/tensorbroker] [--waiters 10000]
"""

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time

import grpc

from tensorbroker.v1 import broker_pb2 as pb
from tensorbroker.v1 import broker_pb2_grpc as pbg

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "python"))
from daemon_wait import wait_for  # noqa: E402  (tests/python/daemon_wait.py)

CHANNELS = 100  # 100 waiting calls per connection at 10,000


def resources(pid):
    """(threads, descriptors, RSS in KiB) of process `pid`."""
    with open(f"/proc/{pid}/status") as status:
        rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return (len(os.listdir(f"/proc/{pid}/task")), len(os.listdir(f"/proc/{pid}/fd")), rss)


def settled(pid):
    """resources(pid) once three readings 0.3 s apart agree on threads and descriptors."""
    readings = []
    while len(readings) < 3 or len({r[:2] for r in readings[-3:]}) > 1:
        readings.append(resources(pid))
        time.sleep(0.3)
    return readings[-1]


def timed(call):
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1e3


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    build = os.path.join(here, "..", "build")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--daemon", default=os.path.join(build, "daemon", "tensorbrokerd"))
    parser.add_argument("--cli", default=os.path.join(build, "cli", "tensorbroker"))
    parser.add_argument("--waiters", type=int, default=10000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tbwait.") as workdir:
        sock = os.path.join(workdir, "b.sock")
        log_path = os.path.join(workdir, "daemon.log")
        with open(log_path, "wb") as log:
            daemon = subprocess.Popen([args.daemon, "--socket", sock, "--cuda-capacity", "0",
                                       "--log-level", "warning"], stderr=log)
        try:
            stub = pbg.BrokerStub(grpc.insecure_channel("unix:" + sock))

            def answers_ping():
                try:
                    stub.Ping(pb.Empty(), timeout=1)
                    return True
                except grpc.RpcError:
                    return False
            try:
                wait_for(daemon, f"serving on {sock}", answers_ping, log_path)
            except AssertionError as e:
                raise SystemExit(str(e))
            done = threading.Event()

            def hello():
                yield pb.SessionRequest(hello=pb.SessionRequest.Hello(pid=os.getpid(),
                                                                      client_name="bench"))
                done.wait()
            events = stub.Session(hello())
            session = next(events).opened.session_id
            stubs = [pbg.BrokerStub(grpc.insecure_channel(
                "unix:" + sock, options=[("grpc.use_local_subchannel_pool", 1)]))
                for _ in range(CHANNELS)]
            for s in stubs:
                s.Ping(pb.Empty(), timeout=30)
            health = [args.cli, "--socket", sock, "health", "--timeout", "30"]
            idle = settled(daemon.pid)
            ping_idle = sorted(timed(lambda: stub.Ping(pb.Empty(), timeout=30))
                               for _ in range(200))[100]
            health_idle = timed(lambda: subprocess.run(health, check=True, capture_output=True))

            futures = [stubs[i % CHANNELS].Get.future(
                pb.GetRequest(session_id=session, name=f"never/{i}", wait_ms=600000),
                timeout=600) for i in range(args.waiters)]
            for s in stubs:  # a Ping behind the Gets on each connection: they have all arrived
                s.Ping(pb.Empty(), timeout=60)
            waiting = settled(daemon.pid)
            ping_waiting = sorted(timed(lambda: stub.Ping(pb.Empty(), timeout=30))
                                  for _ in range(200))[100]
            health_waiting = timed(lambda: subprocess.run(health, check=True,
                                                          capture_output=True))
            pending = sum(not f.done() for f in futures)
            for f in futures:
                f.cancel()
            time.sleep(1)
            after = settled(daemon.pid)
            done.set()
            events.cancel()
        finally:
            daemon.terminate()
            daemon.wait(timeout=60)
            with open(log_path, errors="replace") as log:
                sys.stderr.write(log.read())  # its warnings, if any, as when it was on our stderr
    print(f"waiting Gets on the daemon, {args.waiters} waiters over {CHANNELS} connections "
          f"({pending} still waiting when measured), daemon {os.path.realpath(args.daemon)}")
    print(f"{'':28}{'threads':>8}{'fds':>8}{'RSS MiB':>10}{'Ping p50 ms':>13}{'health ms':>11}")
    print(f"{'none waiting':28}{idle[0]:>8}{idle[1]:>8}{idle[2] / 1024:>10.1f}"
          f"{ping_idle:>13.2f}{health_idle:>11.1f}")
    print(f"{f'{args.waiters} waiting':28}{waiting[0]:>8}{waiting[1]:>8}{waiting[2] / 1024:>10.1f}"
          f"{ping_waiting:>13.2f}{health_waiting:>11.1f}")
    print(f"{'all cancelled':28}{after[0]:>8}{after[1]:>8}{after[2] / 1024:>10.1f}")
    print(f"RSS per waiting Get: {(waiting[2] - idle[2]) * 1024 / args.waiters:.0f} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
