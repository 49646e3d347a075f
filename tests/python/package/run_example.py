"""Runs python/examples/producer.py and then consumer.py against a private daemon; fails unless
both exit 0 and the consumer read the last step."""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import Daemon  # noqa: E402

examples = sys.argv[1]
daemon = Daemon()
try:
    for script in ("producer.py", "consumer.py"):
        done = subprocess.run([sys.executable, os.path.join(examples, script),
                               "--socket", daemon.socket], capture_output=True, text=True,
                              timeout=300)
        sys.stdout.write(done.stdout)
        sys.stderr.write(done.stderr)
        assert done.returncode == 0, f"{script} exited {done.returncode}"
    assert "consumer read step 9: x[0, 0] = 9.0, y[0, 0] = 90.0" in done.stdout, done.stdout
finally:
    assert daemon.stop() == 0
print("example ok")
