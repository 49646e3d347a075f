"""Runs docs/python.md's stream example against a private daemon: python/examples/consumer.py
(the newest frame each time) and consumer.py --every (every frame) start first and wait, then
producer.py publishes; fails unless all three exit 0, the follower ends on the last step and the
history reader read every step in order."""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import Daemon  # noqa: E402

examples = sys.argv[1]
daemon = Daemon()


def run(script, *extra):
    return subprocess.Popen([sys.executable, os.path.join(examples, script),
                             "--socket", daemon.socket, *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


try:
    consumers = [run("consumer.py"), run("consumer.py", "--every")]
    producer = run("producer.py")
    outputs = {}
    for name, proc in (("producer", producer), ("consumer", consumers[0]),
                       ("consumer --every", consumers[1])):
        out, err = proc.communicate(timeout=300)
        sys.stdout.write(out)
        sys.stderr.write(err)
        assert proc.returncode == 0, f"{name} exited {proc.returncode}"
        outputs[name] = out
    assert "consumer --every read steps [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]" in outputs[
        "consumer --every"], outputs
    follower = outputs["consumer"]
    assert follower.startswith("consumer read steps [") and follower.rstrip().endswith("9]"), follower
finally:
    assert daemon.stop() == 0
print("example ok")
