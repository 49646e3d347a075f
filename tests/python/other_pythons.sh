#!/usr/bin/env bash
# Builds the extension for each other CPython given (e.g. pyenv's 3.9 ... 3.13) against an
# installed tensorbroker (BUILD_DIR installed into a prefix of its own; python/CMakeLists.txt
# standalone, find_package), then with that interpreter: a put and a get through the buffer
# protocol (no numpy needed), and the asyncio path (put_async, get_async, a cancelled
# get_async leaving no waiter). A manual check, not in ctest: CI machines have only Debian's
# python3.
#   other_pythons.sh SOURCE_DIR BUILD_DIR PYTHON...
set -euo pipefail
src=$1 build_dir=$2
shift 2
daemon=$build_dir/daemon/tensorbrokerd
work=$(mktemp -d)
trap 'kill "$daemon_pid" 2>/dev/null || true; rm -rf "$work"' EXIT
. "$src/tests/support/daemon_wait.sh"
cmake --install "$build_dir" --prefix "$work/prefix" >"$work/install.log" 2>&1 ||
  { tail -n 30 "$work/install.log"; exit 1; }
version=$(sed -n 's/^project(tensorbroker VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
mkdir -m 0700 "$work/run"
"$daemon" --config /dev/null --socket "$work/run/b.sock" --capacity 64M 2>"$work/daemon.log" &
daemon_pid=$!
wait_for_daemon "$daemon_pid" "$work/daemon.log" "serving on $work/run/b.sock" test -S "$work/run/b.sock"
for python in "$@"; do
  tag=$("$python" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')
  build=$work/build-$tag
  cmake -S "$src/python" -B "$build" -G Ninja -DTENSORBROKER_PYTHON="$python" \
    -DCMAKE_PREFIX_PATH="$work/prefix" -DTENSORBROKER_VERSION="$version" \
    >"$work/cmake-$tag.log" 2>&1 || { tail -n 30 "$work/cmake-$tag.log"; exit 1; }
  ninja -C "$build" tensorbroker_python >"$work/ninja-$tag.log" 2>&1 ||
    { tail -n 30 "$work/ninja-$tag.log"; exit 1; }
  (cd / && env -u PYTHONPATH -u LD_LIBRARY_PATH PYTHONPATH="$build/python" "$python" -c "
import asyncio, tensorbroker
c = tensorbroker.connect('$work/run/b.sock')
c.put('py/$tag', bytearray(b'abcdefgh'))
t = c.get('py/$tag', timeout=0)
assert (t.shape, t.dtype) == ((8,), 'uint8'), t

async def main():
    waiter = asyncio.create_task(c.get_async('py/$tag/async', timeout=60))
    await c.put_async('py/$tag/async', bytearray(b'xy'))
    assert (await waiter).shape == (2,)
    never = asyncio.create_task(c.get_async('py/$tag/never'))
    while c.stats()['waiting_gets'] == 0:
        await asyncio.sleep(0.01)
    never.cancel()
    try:
        await never
    except asyncio.CancelledError:
        pass
    assert c.stats()['waiting_gets'] == 0

asyncio.run(main())
print('CPython', '$tag', 'tensorbroker', tensorbroker.__version__,
      ': put, get, get_async, put_async and a cancelled get_async OK')
")
done
