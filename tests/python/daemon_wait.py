"""Waiting for a tensorbrokerd that a test or bench started to reach a state (serving, metrics
up, a log line): the one way every Python test and bench does it. Bounded in wall-clock time (a
deadline, never a count of tries), and failing at once, with the daemon's exit status and the
end of its log, when the daemon exits first.

Needs neither pytest (the GPU tests also run without it) nor the tensorbroker package (only
wait_until_serving imports it): tests/deploy, tests/cli and bench/ put this directory on
sys.path and use wait_for with their own check. The daemon's log is its stderr in a file: start
it with stderr=open(path, "wb") and pass `path`."""

import signal
import time

DEADLINE = 30  # seconds; only against a daemon that hangs on its way up, never a measurement
QUOTED_LOG_LINES = 100


def describe_exit(returncode):
    """"exit status 2" or "killed by signal 9 (SIGKILL)" for a Popen.returncode."""
    if returncode >= 0:
        return f"exit status {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = "unknown"
    return f"killed by signal {-returncode} ({name})"


def quote_log(log_path, lines=QUOTED_LOG_LINES):
    """The last `lines` lines of the file at `log_path`, each prefixed with "  | "."""
    if log_path is None:
        return "  | (not captured)\n"
    try:
        with open(log_path, errors="replace") as f:
            text = f.read()
    except OSError as e:
        return f"  | (cannot read {log_path}: {e})\n"
    all_lines = text.splitlines()
    if not all_lines:
        return "  | (empty)\n"
    kept = all_lines[-lines:]
    left_out = len(all_lines) - len(kept)
    head = f"  | ({left_out} earlier lines left out)\n" if left_out else ""
    return head + "".join(f"  | {line}\n" for line in kept)


def wait_for(proc, state, reached, log_path=None, timeout=DEADLINE, interval=0.05):
    """Calls `reached()` every `interval` seconds until it returns something true, and returns
    that. AssertionError at once when the daemon `proc` (a Popen) exits first ("tensorbrokerd
    exited (exit status 2) before it was <state>"), and once `timeout` seconds have passed
    ("tensorbrokerd is not <state> after 30 s"); either quotes the last lines of the log at
    `log_path`. `state` completes "it is ...": "serving on /tmp/b.sock"."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise AssertionError(
                f"tensorbrokerd exited ({describe_exit(proc.returncode)}) before it was {state}; "
                f"its log:\n{quote_log(log_path)}")
        answer = reached()
        if answer:
            return answer
        if time.monotonic() >= deadline:
            raise AssertionError(f"tensorbrokerd is not {state} after {timeout:g} s; its log:\n"
                                 f"{quote_log(log_path)}")
        time.sleep(interval)


def log_line(log_path, text):
    """For wait_for: the first line of the log at `log_path` containing `text`, or None."""
    try:
        with open(log_path, errors="replace") as f:
            return next((line for line in f if text in line), None)
    except FileNotFoundError:
        return None


def wait_until_serving(socket, proc, log_path=None, timeout=DEADLINE):
    """Returns once the daemon `proc` answers on `socket` (tensorbroker.connect succeeds); see
    wait_for for how it fails."""
    import tensorbroker

    def answers():
        try:
            tensorbroker.connect(socket, timeout=1).close()
            return True
        except tensorbroker.Unavailable:
            return False

    wait_for(proc, f"serving on {socket}", answers, log_path, timeout)

