#!/usr/bin/env bash
# Builds the Debian package tensorbroker_<version>_<arch>.deb (cpack -G DEB) from a build tree
# configured for /usr, without the tests and the benchmark. Prints the package's path last.
#
# Usage: deploy/build-deb.sh [--build-dir DIR] [--out DIR] [-- EXTRA_CMAKE_ARGS...]
#   --build-dir DIR   where to build (default: build-deb/)
#   --out DIR         where to put the .deb (default: the build directory)
# Needs the packages deploy/install-deps.sh installs (and dpkg-dev for dpkg-shlibdeps).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)

build_dir=$src/build-deb
out_dir=""
cmake_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build_dir="$2"; shift 2 ;;
    --out) out_dir="$2"; shift 2 ;;
    --) shift; cmake_args=("$@"); break ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "build-deb.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
out_dir=${out_dir:-$build_dir}

cmake -S "$src" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_INSTALL_PREFIX=/usr -DTENSORBROKER_BUILD_TESTS=OFF -DTENSORBROKER_BUILD_BENCH=OFF \
  "${cmake_args[@]}" >/dev/null
cmake --build "$build_dir" -j"$(nproc)" >/dev/null
mkdir -p "$out_dir"
(cd "$build_dir" && cpack -G DEB -B "$out_dir" >/dev/null)
rm -rf "$out_dir/_CPack_Packages"
ls "$out_dir"/tensorbroker_*.deb
