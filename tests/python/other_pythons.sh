#!/usr/bin/env bash
# Builds the extension for each other CPython given (e.g. pyenv's 3.9 ... 3.13) through the
# wheel's CMake path (TENSORBROKER_PYTHON_WHEEL=ON), then imports it with that interpreter and
# does a put and a get against a real daemon (no numpy needed: a bytearray through the buffer
# protocol). A manual check, not in ctest: CI machines have only Debian's python3.
#   other_pythons.sh SOURCE_DIR TENSORBROKERD PYTHON...
set -euo pipefail
src=$1 daemon=$2
shift 2
work=$(mktemp -d)
trap 'kill "$daemon_pid" 2>/dev/null || true; rm -rf "$work"' EXIT
. "$src/tests/support/daemon_wait.sh"
mkdir -m 0700 "$work/run"
"$daemon" --config /dev/null --socket "$work/run/b.sock" --capacity 64M 2>"$work/daemon.log" &
daemon_pid=$!
wait_for_daemon "$daemon_pid" "$work/daemon.log" "serving on $work/run/b.sock" test -S "$work/run/b.sock"
for python in "$@"; do
  tag=$("$python" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')
  build=$work/build-$tag
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTENSORBROKER_PYTHON="$python" \
    -DTENSORBROKER_PYTHON_WHEEL=ON -DTENSORBROKER_BUILD_TESTS=OFF -DTENSORBROKER_BUILD_BENCH=OFF \
    >"$work/cmake-$tag.log" 2>&1 || { tail -n 30 "$work/cmake-$tag.log"; exit 1; }
  ninja -C "$build" tensorbroker_python >"$work/ninja-$tag.log" 2>&1 ||
    { tail -n 30 "$work/ninja-$tag.log"; exit 1; }
  mkdir -p "$work/pkg-$tag"
  cp -r "$build/python/tensorbroker" "$work/pkg-$tag/"
  cp -L "$build/client/libtensorbroker_client.so.0" "$build/proto/libtensorbroker_proto.so.0" \
    "$work/pkg-$tag/tensorbroker/"
  (cd / && env -u PYTHONPATH PYTHONPATH="$work/pkg-$tag" "$python" -c "
import sys, tensorbroker
c = tensorbroker.connect('$work/run/b.sock')
c.put('py/$tag', bytearray(b'abcdefgh'))
t = c.get('py/$tag', timeout=0)
assert (t.shape, t.dtype) == ((8,), 'uint8'), (t.shape, t.dtype)
print('CPython', '$tag', 'tensorbroker', tensorbroker.__version__, ': put and get OK')
")
done
