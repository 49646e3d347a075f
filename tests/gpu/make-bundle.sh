#!/usr/bin/env bash
# Packs what tests/gpu/run.sh needs on a GPU machine that cannot build the project (no apt, no
# gRPC, no Boost; e.g. the H200 machine lent to this project): the daemon and the C++ GPU tests
# built here, every shared library they and the client library load (from ldd, except glibc,
# libstdc++ and libgcc_s, which the target has), the headers and sources needed to build only
# the Python extension there, for its own Python, and the GPU test scripts.
#
#   bash tests/gpu/make-bundle.sh [BUILD_DIR] [OUT]     # default: build gpu-bundle.tar.gz
#
# The build must have CUDA support (TENSORBROKER_CUDA not OFF, toolkit found). Prints the newest
# glibc symbol version the binaries need: the target's glibc must be at least that.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
out=${2:-gpu-bundle.tar.gz}
for f in "$build/daemon/tensorbrokerd" "$build/tests/gpu/gpu_tests" \
         "$build/tests/gpu/tensorbroker_cuda_peer" \
         "$build/client/libtensorbroker_client.so" "$build/python/tensorbroker/_version.py"; do
  [ -e "$f" ] || { echo "make-bundle: $f is missing (build with CUDA and Python first)" >&2; exit 1; }
done

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root="$stage/tensorbroker-gpu"
mkdir -p "$root"/{bin,lib,include,src/common,src/python,tests}

cp "$build/daemon/tensorbrokerd" "$build/tests/gpu/gpu_tests" \
   "$build/tests/gpu/tensorbroker_cuda_peer" "$root/bin/"
cp -P "$build"/client/libtensorbroker_client.so* "$build"/proto/libtensorbroker_proto.so* "$root/lib/"
# Every library the binaries load, resolved here; the target's own glibc and C++ runtime stay.
ldd "$root/bin/tensorbrokerd" "$root/bin/gpu_tests" "$root/bin/tensorbroker_cuda_peer" \
    "$root"/lib/libtensorbroker_client.so |
  awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libpthread|libdl|librt|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' |
  while read -r lib; do cp -L "$lib" "$root/lib/"; done

# Headers and sources for the Python extension (python/CMakeLists.txt builds the same files).
cp -r client/include/tensorbroker "$root/include/"
cp -r /usr/include/dlpack /usr/include/absl "$root/include/"
# The two pure helpers python/CMakeLists.txt compiles into the extension too, and the stats
# schema (a header) that its stats dict reads.
cp common/strided_copy.{h,cc} common/tensor_layout.{h,cc} common/stats_schema.h "$root/src/common/"
cp -r python/src "$root/src/python/"
mkdir -p "$root/python/tensorbroker"
cp python/tensorbroker/*.py python/tensorbroker/_core.pyi python/tensorbroker/py.typed \
   "$build/python/tensorbroker/_version.py" "$root/python/tensorbroker/"
cp -r tests/python/gpu "$root/tests/python-gpu"
cp tests/python/daemon_wait.py "$root/tests/"
find "$root/tests" -name __pycache__ -prune -exec rm -rf {} +

need=$(objdump -T "$root"/bin/* "$root"/lib/*.so* 2>/dev/null | grep -o 'GLIBC_[0-9.]*' |
       sort -u -V | tail -1)
echo "$need" > "$root/GLIBC_NEEDED"
tar -C "$stage" -czf "$out" tensorbroker-gpu
echo "make-bundle: $out ($(du -h "$out" | cut -f1)); needs glibc >= ${need#GLIBC_}"
