#!/usr/bin/env bash
# Installs the build tree into a scratch prefix, checks that its client library exports only
# its API (check_exports.sh), then builds tests/package_consumer against it
# twice, with find_package(tensorbroker) and with pkg-config, starts the installed daemon and
# runs both consumers (a put and a get each).
#   run.sh BUILD_DIR [EXTRA_CXX_FLAGS]      # flags: the sanitizer flags of a sanitized build
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../support/daemon_wait.sh"
build=$1 flags=${2:-}
work=$(mktemp -d)
daemon_pid=""
daemon_log=$work/daemon.log
cleanup() {
  [ -z "$daemon_pid" ] || { kill -TERM "$daemon_pid" 2>/dev/null; wait "$daemon_pid" || true; }
  # What the daemon wrote to its stderr, for whoever reads the test's output.
  [ ! -s "$daemon_log" ] || { echo "tensorbrokerd's log:"; daemon_wait_quote_log "$daemon_log"; }
  rm -rf "$work"
}
trap cleanup EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
"$here/check_exports.sh" "$work/prefix/lib/libtensorbroker_client.so.0"
cmake -S "$here" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" >/dev/null
cmake --build "$work/cmake-build" >/dev/null
echo "find_package(tensorbroker): built"
# shellcheck disable=SC2046  # pkg-config's output is a list of words
c++ -std=c++17 $flags "$here/main.cc" -o "$work/pkgconfig-consumer" \
  $(PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig" pkg-config --cflags --libs tensorbroker)
echo "pkg-config tensorbroker: built"
socket=$work/b.sock
"$work/prefix/sbin/tensorbrokerd" --socket "$socket" --capacity 64M --log-level warning \
  2>"$daemon_log" &
daemon_pid=$!
wait_for_daemon "$daemon_pid" "$daemon_log" "serving on $socket" test -S "$socket" || exit 1
"$work/cmake-build/consumer" "$socket"
"$work/prefix/bin/tensorbroker" --socket "$socket" rm consumer/x
"$work/pkgconfig-consumer" "$socket"
kill -TERM "$daemon_pid"; wait "$daemon_pid"; daemon_pid=""
echo "installed daemon stopped cleanly"
