"""A consumer process for test_streams.py: follows a stream of versions of one name with
get(after_version=...) and reports what it saw.

  stream_follower.py SOCKET NAME LAST_STAMP [--oldest]

Prints {"ready": true} once connected, then follows until it has read the frame stamped
LAST_STAMP, and prints {"seen": [[version, stamp], ...], "torn": [...]}: every frame is a
uint64 array whose elements all hold the producer's stamp; a frame with any other element is
torn and reported with its version."""

import json
import sys

import numpy as np

import tensorbroker


def main():
    socket, name, last = sys.argv[1], sys.argv[2], int(sys.argv[3])
    oldest = "--oldest" in sys.argv
    client = tensorbroker.connect(socket)
    print(json.dumps({"ready": True}), flush=True)
    seen, torn = [], []
    version = 0
    while True:
        with client.get(name, timeout=60, after_version=version, oldest=oldest) as t:
            frame = np.asarray(t)
            stamp = int(frame[0])
            if not (frame == frame[0]).all():
                torn.append(t.version)
            seen.append([t.version, stamp])
            version = t.version
        if stamp == last:
            break
    print(json.dumps({"seen": seen, "torn": torn}), flush=True)
    client.close()


if __name__ == "__main__":
    main()
