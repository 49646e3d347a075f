"""Producer: publishes a stream of frames, each a new version of one name, and keeps the last 10
readable by number (keep=10).

    PYTHONPATH=build/python /usr/bin/python3 python/examples/producer.py [--socket PATH] [--frames N]

Start consumer.py (the newest frame each time) and consumer.py --every (every frame) first, or
after: they wait for the next version either way.
"""

import argparse
import time

import numpy as np
import torch

import tensorbroker

parser = argparse.ArgumentParser()
parser.add_argument("--socket", default=None, help="the daemon's socket (default: the usual one)")
parser.add_argument("--frames", type=int, default=10)
args = parser.parse_args()

client = tensorbroker.connect(args.socket)
for step in range(args.frames):
    # No copy: fill a tensor that already lives in broker memory, then seal it. Each seal is a
    # new version of "demo/frame"; the last 10 stay readable as get(name, version=v).
    with client.create("demo/frame", (100, 10000), "float32", replace=True, keep=10) as frame:
        torch.from_dlpack(frame).fill_(step)     # or np.asarray(frame)[:] = step
        frame.seal()                             # visible from now on, read-only
    print(f"published step {step} as version {frame.version}", flush=True)
    time.sleep(0.05)
# One copy of an array (NumPy or torch, any strides) is the other way to publish.
client.put("demo/info", np.array([args.frames], dtype=np.int64), replace=True)
