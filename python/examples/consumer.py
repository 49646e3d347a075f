"""Consumer: follows the producer's stream of frames without copying them.

    PYTHONPATH=build/python /usr/bin/python3 python/examples/consumer.py [--socket PATH] [--every]

By default it reads the newest frame each time (get(after_version=v) waits for a version newer
than the last one it read, and may skip frames if it is slower than the producer). With --every
it reads every frame the name still keeps, in order (oldest=True steps through the history).
"""

import argparse

import numpy as np
import torch

import tensorbroker

parser = argparse.ArgumentParser()
parser.add_argument("--socket", default=None, help="the daemon's socket (default: the usual one)")
parser.add_argument("--frames", type=int, default=10, help="stop after the frame of this step - 1")
parser.add_argument("--every", action="store_true", help="every kept frame, not the newest")
args = parser.parse_args()

client = tensorbroker.connect(args.socket)
version, steps = 0, []
while not steps or steps[-1] < args.frames - 1:
    # Waits (up to 60 s) for a version newer than the last one read.
    with client.get("demo/frame", timeout=60, after_version=version, oldest=args.every) as t:
        assert t.version > version
        version = t.version
        frame = torch.from_dlpack(t) if args.every else np.asarray(t)  # the broker's own pages
        steps.append(int(frame[0, 0]))
        assert frame.shape == (100, 10000) and (frame == steps[-1]).all()
        del frame  # the view holds the lease too: the broker frees a version only after both
if args.every:
    assert steps == list(range(args.frames)), steps
print(f"consumer{' --every' if args.every else ''} read steps {steps}", flush=True)
