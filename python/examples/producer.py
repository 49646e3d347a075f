"""Producer: publishes a 100x10000 float32 tensor ten times, each a new version of one name.

    PYTHONPATH=build/python /usr/bin/python3 python/examples/producer.py [--socket PATH]
"""

import argparse

import numpy as np
import torch

import tensorbroker

parser = argparse.ArgumentParser()
parser.add_argument("--socket", default=None, help="the daemon's socket (default: the usual one)")
args = parser.parse_args()

client = tensorbroker.connect(args.socket)
for step in range(10):
    # One copy of a NumPy array or a torch tensor (any strides) into broker memory ...
    x = np.full((100, 10000), step, dtype=np.float32)
    client.put("demo/x", x if step % 2 == 0 else torch.from_numpy(x), replace=True)
    # ... or no copy at all: fill a tensor that already lives in broker memory.
    with client.create("demo/y", (100, 10000), "float32", replace=True) as y:
        torch.from_dlpack(y).fill_(step * 10)    # or np.asarray(y)[:] = ...
        y.seal()                                 # now it is visible, read-only
    client.put("demo/step", np.array(step), replace=True)
    print(f"published step {step}", flush=True)
client.put("demo/done", np.array(True))
