#!/usr/bin/env bash
# The Python package as a user installs it (issue 15): a venv around the given interpreter
# (--system-site-packages, for its numpy, torch and pytest), `pip wheel --no-build-isolation`
# of ./python offline, `pip install` of that wheel into the venv; then the package imports from
# the venv with the project's version, the extension finds its client library where the way it
# was built says (no LD_LIBRARY_PATH), and the package's own tests pass from there.
#   wheel_venv.sh SOURCE_DIR PYTHON WHEEL_BUILD_DIR [INSTALLED_BUILD_DIR]
# Without INSTALLED_BUILD_DIR the wheel is bundled: it carries libtensorbroker_client.so.0 and
# libtensorbroker_proto.so.0 beside the extension ($ORIGIN), nothing of any build tree. With it,
# that build tree is first installed (`cmake --install`) into a prefix of its own, and the wheel
# is built against it (TENSORBROKER_PREFIX, find_package): it carries no library and its
# extension loads the prefix's.
# WHEEL_BUILD_DIR is kept (CMake's tree for the wheel: a second run only relinks, and ccache
# serves what the suite's build compiled). Needs TENSORBROKERD and TENSORBROKER_CLI.
set -euo pipefail
src=$1 python=$2 wheel_build=$3 installed_build=${4:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 0755 "$work"  # peers of the tests run the venv's python as uid 65534
fail() { echo "FAIL: $*" >&2; exit 1; }

if [ -n "$installed_build" ]; then
  cmake --install "$installed_build" --prefix "$work/prefix" >"$work/cmake-install.log" 2>&1 ||
    { cat "$work/cmake-install.log" >&2; fail "cmake --install $installed_build"; }
  export TENSORBROKER_PREFIX=$work/prefix
  echo "installed $installed_build into $TENSORBROKER_PREFIX"
fi
"$python" -m venv --system-site-packages "$work/venv"
venv_python=$work/venv/bin/python
# A pybind11 of the build environment's own (pip's in a venv) is the one CMake gets: a stand-in
# module that names Debian's CMake directory by another spelling, so the cache shows whose it is.
mkdir -p "$work/env-pybind11/pybind11"
pybind11_dir=/usr/lib/cmake/../cmake/pybind11
printf 'def get_cmake_dir():\n    return "%s"\n' "$pybind11_dir" \
  >"$work/env-pybind11/pybind11/__init__.py"
started=$(date +%s)
PYTHONPATH=$work/env-pybind11 TENSORBROKER_WHEEL_BUILD_DIR=$wheel_build \
  "$venv_python" -m pip wheel --no-build-isolation \
  --no-deps --no-index -w "$work/dist" "$src/python" >"$work/wheel.log" 2>&1 ||
  { tail -n 60 "$work/wheel.log" >&2; fail "pip wheel"; }
cached=$(sed -n 's/^pybind11_DIR:[A-Z]*=//p' "$wheel_build/CMakeCache.txt")
[ "$cached" = "$pybind11_dir" ] || fail "CMake took pybind11 from '$cached', not the environment's $pybind11_dir"
echo "pybind11: the build environment's ($pybind11_dir)"
wheel=$(ls "$work"/dist/tensorbroker-*.whl)
echo "built $(basename "$wheel") in $(( $(date +%s) - started )) s"
"$venv_python" -m pip install --no-deps --no-index "$wheel" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log" >&2; fail "pip install"; }

version=$(sed -n 's/^project(tensorbroker VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
package=$(cd / && env -u PYTHONPATH -u LD_LIBRARY_PATH "$venv_python" -c \
  "import tensorbroker; print(tensorbroker.__file__.rsplit('/', 1)[0], tensorbroker.__version__)")
site=$("$venv_python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
[ "$package" = "$site/tensorbroker $version" ] || fail "imported '$package', expected '$site/tensorbroker $version'"
echo "imports from the venv: $package"

core=$(ls "$site"/tensorbroker/_core*.so)
runpath_of() { readelf -d "$1" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p'; }
resolved=$(env -u LD_LIBRARY_PATH ldd "$core" | grep libtensorbroker || true)
if [ -z "$installed_build" ]; then
  # The extension and the client library find what they load beside themselves, not elsewhere.
  for lib in "$core" "$site/tensorbroker/libtensorbroker_client.so.0"; do
    runpath=$(runpath_of "$lib")
    [ "$runpath" = '$ORIGIN' ] || fail "$(basename "$lib"): RUNPATH '$runpath', expected \$ORIGIN"
  done
  libdir=$site/tensorbroker
  echo -n "bundled: "
else
  # No library in the wheel: the extension loads the installed prefix's.
  bundled=$(cd "$site/tensorbroker" && ls libtensorbroker* 2>/dev/null || true)
  [ -z "$bundled" ] || fail "the wheel carries $bundled; built against an installed tensorbroker it must not"
  runpath=$(runpath_of "$core")
  [ "$runpath" = "$TENSORBROKER_PREFIX/lib" ] ||
    fail "$(basename "$core"): RUNPATH '$runpath', expected $TENSORBROKER_PREFIX/lib"
  libdir=$TENSORBROKER_PREFIX/lib
  echo -n "against the installed tensorbroker: "
fi
for name in libtensorbroker_client.so.0 libtensorbroker_proto.so.0; do
  grep -q "$name => $libdir/$name" <<<"$resolved" ||
    fail "$name is not loaded from $libdir: $resolved"
done
echo "libtensorbroker_client and libtensorbroker_proto load from $libdir"

# The package's tests, from the venv, against the real daemon: all but test_memory.py (its
# 1 GiB tensors and 10,000 cycles test the package, not how it was installed), fewer against the
# installed library (the same code as bundled; what differs is where it comes from, checked
# above).
if [ -z "$installed_build" ]; then
  tests=(test_interop.py test_dtypes.py test_api.py test_errors.py test_devices.py
         test_tenancy.py test_asyncio.py test_stubs.py test_streams.py)
else
  tests=(test_interop.py test_api.py test_asyncio.py test_stubs.py)
fi
cd "$src/tests/python/package"
env -u PYTHONPATH -u LD_LIBRARY_PATH -u LD_PRELOAD PYTHONDONTWRITEBYTECODE=1 \
  "$venv_python" -m pytest -q -p no:cacheprovider "${tests[@]}"
