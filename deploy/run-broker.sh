#!/usr/bin/env bash
# Builds tensorbroker and runs the broker in the foreground with working defaults: the default
# socket (/run/tensorbroker/broker.sock for root), capacity = half of /dev/shm. Does its own
# set-up on a fresh Debian 12 machine (Debian packages, as root or through sudo).
#
# Usage: deploy/run-broker.sh [tensorbrokerd flags...]   e.g. --capacity 4G --socket /run/tb/broker.sock
# Stop it with Ctrl-C (SIGINT) or SIGTERM: it removes its segments and socket and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target tensorbrokerd tensorbroker
echo "run-broker: CLI at $(pwd)/build/cli/tensorbroker; starting tensorbrokerd" >&2
exec build/daemon/tensorbrokerd "$@"
