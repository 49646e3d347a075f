"""Waiting for a tensorbrokerd the tests started, shared by the package and GPU tests (no
pytest needed: the GPU tests also run without it)."""

import time


def wait_until_serving(socket, proc, timeout=30):
    """Returns once the daemon `proc` answers on `socket`; AssertionError if it exits first or
    does not answer within `timeout` seconds."""
    import tensorbroker

    deadline = time.monotonic() + timeout
    while True:
        try:
            tensorbroker.connect(socket, timeout=1).close()
            return
        except tensorbroker.Unavailable:
            assert proc.poll() is None, "tensorbrokerd exited during start-up"
            assert time.monotonic() < deadline, "tensorbrokerd did not answer"
            time.sleep(0.05)
