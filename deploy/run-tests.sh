#!/usr/bin/env bash
# Builds tensorbroker and runs the whole test suite (ctest). Does its own set-up on a fresh
# Debian 12 machine: installs the Debian packages it needs (as root, or through sudo).
#
# Usage: deploy/run-tests.sh [--sanitize address|thread] [--build-dir DIR] [-- CTEST_ARGS...]
#   --sanitize address   ASan + UBSan build (in build-asan/ unless --build-dir)
#   --sanitize thread    TSan build (in build-tsan/)
set -euo pipefail
cd "$(dirname "$0")/.."

sanitize=""
build_dir=""
ctest_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --sanitize) sanitize="$2"; shift 2 ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    --) shift; ctest_args=("$@"); break ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "run-tests.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
case "$sanitize" in
  "") build_dir=${build_dir:-build} ;;
  address) build_dir=${build_dir:-build-asan} ;;
  thread) build_dir=${build_dir:-build-tsan} ;;
  *) echo "run-tests.sh: --sanitize takes 'address' or 'thread'" >&2; exit 2 ;;
esac

bash deploy/install-deps.sh --with-torch   # the Python package tests use PyTorch
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTENSORBROKER_SANITIZE="$sanitize" >/dev/null
cmake --build "$build_dir" -j"$(nproc)"
# Sanitizer reports fail the test that triggered them.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# ignore_noninstrumented_modules: memcpy and friends called from inside the prebuilt gRPC and
# protobuf libraries are not checked (they hand buffers over by means TSan cannot see).
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1:suppressions=$(pwd)/deploy/tsan.supp}
status=0
ctest --test-dir "$build_dir" --output-on-failure --timeout 600 --parallel "$(nproc)" \
  "${ctest_args[@]}" || status=$?
# Say why tests were skipped (GPU tests without a usable GPU): the reason each one printed.
# GoogleTest prints the reason on the line after "file:line: Skipped"; pytest -rs prints
# "SKIPPED [n] file:line: reason".
log="$build_dir/Testing/Temporary/LastTest.log"
reasons=$( { grep -h -A1 ': Skipped$' "$log" 2>/dev/null | grep -v -e ': Skipped$' -e '^--$';
             grep -h '^SKIPPED \[' "$log" 2>/dev/null | sed 's/^SKIPPED \[[0-9]*\] [^ ]* //'; } |
          sort | uniq -c || true)
[ -z "$reasons" ] || printf 'skipped tests, and why:\n%s\n' "$reasons"
# The soaks' figures (tests/integration/soak_test.cc prints them on lines starting "soak:").
figures=$(grep -h '^soak: ' "$log" 2>/dev/null || true)
[ -z "$figures" ] || printf 'figures from the soaks:\n%s\n' "$figures"
exit "$status"
