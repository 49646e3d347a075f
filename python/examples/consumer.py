"""Consumer: waits for the producer's tensors and reads them without copying.

    PYTHONPATH=build/python /usr/bin/python3 python/examples/consumer.py [--socket PATH]
"""

import argparse

import numpy as np
import torch

import tensorbroker

parser = argparse.ArgumentParser()
parser.add_argument("--socket", default=None, help="the daemon's socket (default: the usual one)")
args = parser.parse_args()

client = tensorbroker.connect(args.socket)
client.get("demo/done", timeout=60).release()     # waits until the producer is done
x = torch.from_dlpack(client.get("demo/x"))        # the broker's pages, as a torch tensor
y = np.asarray(client.get("demo/y"))               # the same, as a read-only NumPy array
step = int(np.asarray(client.get("demo/step")))
assert x.shape == (100, 10000) and float(x[0, 0]) == step
assert y.shape == (100, 10000) and y[0, 0] == step * 10 and not y.flags.writeable
print(f"consumer read step {step}: x[0, 0] = {float(x[0, 0])}, y[0, 0] = {y[0, 0]}")
# x and y each hold a lease; the broker may free version `step` only after they are gone.
del x, y
