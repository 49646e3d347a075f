#!/usr/bin/env bash
# Runs the GPU tests on a machine with an NVIDIA GPU, in well under 5 minutes: the C++ GPU tests
# (tests/gpu: the daemon's slabs, the broker end to end) and the Python GPU tests
# (tests/python/gpu: CUDA between processes with PyTorch and CuPy), then prints the figures
# (Get latencies, first slab open).
#
#   bash tests/gpu/run.sh --build DIR      # a build tree of this project made on this machine
#   bash tests/gpu/run.sh --bundle FILE    # what tests/gpu/make-bundle.sh packed elsewhere
#   ... --keep DIR                         # unpack and build in DIR and leave it there
#
# --bundle is for GPU machines that cannot build the project (no apt, gRPC or Boost, like the
# H200 machine lent to this project): the binaries come prebuilt with their libraries, and only
# the Python extension is compiled here, for this machine's python3 (pybind11 and a C++17
# compiler needed). PYTHON overrides the interpreter. Exit status: 0 when every test passed or
# was skipped for a reason it printed.
set -uo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)
python=${PYTHON:-python3}
mode=""; source_path=""; keep=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) mode=build; source_path=$2; shift 2 ;;
    --bundle) mode=bundle; source_path=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    *) echo "run.sh: unknown argument '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done
[ -n "$mode" ] || { echo "run.sh: give --build DIR or --bundle FILE" >&2; exit 2; }
start=$(date +%s)
say() { printf '\n=== %s (%ss)\n' "$*" "$(( $(date +%s) - start ))"; }

say "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,uuid --format=csv,noheader 2>&1 || true
"$python" -c 'import sys; print("python", sys.version.split()[0])'
"$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
"available", torch.cuda.is_available())' 2>&1 | tail -1
"$python" -c 'import cupy; print("cupy", cupy.__version__)' 2>&1 | tail -1
ldd --version | head -1

if [ -n "$keep" ]; then
  work=$keep; mkdir -p "$work"   # kept for a look afterwards
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
if [ "$mode" = build ]; then
  build=$(cd "$source_path" && pwd)
  daemon=$build/daemon/tensorbrokerd
  gpu_tests=$build/tests/gpu/gpu_tests
  cuda_peer=$build/tests/gpu/tensorbroker_cuda_peer
  pythonpath=$build/python
  gpu_python_tests=$repo/tests/python/gpu
  export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
else
  tar -C "$work" -xzf "$source_path" || exit 1
  b=$work/tensorbroker-gpu
  daemon=$b/bin/tensorbrokerd
  gpu_tests=$b/bin/gpu_tests
  cuda_peer=$b/bin/tensorbroker_cuda_peer
  gpu_python_tests=$b/tests/python-gpu
  export LD_LIBRARY_PATH=$b/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  echo "bundle needs $(cat "$b/GLIBC_NEEDED"); missing libraries:"
  ldd "$daemon" "$gpu_tests" "$b/lib/libtensorbroker_client.so" | grep 'not found' || echo "  none"

  say "building the Python extension for $("$python" -c 'import sys; print(sys.executable)')"
  suffix=$("$python" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
  py_include=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
  pybind_include=$("$python" -c 'import pybind11; print(pybind11.get_include())' 2>/dev/null ||
                   echo /usr/include)
  pythonpath=$b/python
  # One compiler per source, all cores at once (a single c++ call takes a minute of device time).
  mkdir -p "$b/obj"
  export CXX=${CXX:-c++} B=$b PYBIND_INCLUDE=$pybind_include PY_INCLUDE=$py_include
  printf '%s\n' "$b"/src/python/src/*.cc "$b"/src/common/strided_copy.cc \
      "$b"/src/common/tensor_layout.cc |
    xargs -P "$(nproc)" -I{} sh -c '$CXX -O2 -std=c++17 -fPIC -fvisibility=hidden \
      -I"$B/src" -I"$B/include" -I"$PYBIND_INCLUDE" -I"$PY_INCLUDE" \
      -c "$1" -o "$B/obj/$(basename "$1" .cc).o"' _ {} &&
  $CXX -shared "$b"/obj/*.o -L"$b/lib" -ltensorbroker_client "$b"/lib/libabsl_*.so* \
    -Wl,--version-script="$b/src/python/src/exports.map" -Wl,-rpath,"$b/lib" \
    -o "$pythonpath/tensorbroker/_core$suffix" ||
    { echo "run.sh: extension build failed"; exit 1; }
  PYTHONPATH=$pythonpath "$python" -c 'import tensorbroker; print("built tensorbroker",
tensorbroker.__version__, tensorbroker._core.__file__)' || exit 1
fi

status=0
say "C++ GPU tests"
TENSORBROKERD=$daemon TENSORBROKER_CUDA_PEER=$cuda_peer "$gpu_tests" || status=1

cd "$gpu_python_tests"
# The same suite on each path GPU memory can take: legacy CUDA IPC handles, then VMM
# descriptors (tests/python/gpu/test_cuda_interop.py reads TENSORBROKER_CUDA_HANDLES).
for handles in ipc vmm; do
  say "Python GPU tests, --cuda-handles $handles (producer and consumer in different processes)"
  if "$python" -c 'import pytest' 2>/dev/null; then
    PYTHONPATH=$pythonpath TENSORBROKERD=$daemon TENSORBROKER_CUDA_HANDLES=$handles \
      "$python" -m pytest -q -s -rs -p no:cacheprovider test_cuda_interop.py || status=1
  else
    PYTHONPATH=$pythonpath TENSORBROKERD=$daemon TENSORBROKER_CUDA_HANDLES=$handles \
      "$python" test_cuda_interop.py || status=1
  fi
done
say "done: exit status $status"
exit "$status"
