#!/usr/bin/env bash
# The shell's way of waiting for a daemon (daemon_wait.sh), with the real tensorbrokerd: a daemon
# that exits on its way up fails the wait at once (well under the 30 s deadline), with its exit
# status and its own error line; one that serves passes it.
#   daemon_wait_test.sh TENSORBROKERD
set -euo pipefail
. "$(dirname "$0")/daemon_wait.sh"
daemon=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$daemon" --socket "$work/a.sock" --capacity nonsense 2>"$work/a.log" &
started=$(date +%s)
if wait_for_daemon $! "$work/a.log" "serving on $work/a.sock" test -S "$work/a.sock" \
     2>"$work/failure"; then
  echo "FAIL: the wait passed for a daemon that exited"; exit 1
fi
took=$(( $(date +%s) - started ))
# At once: before half the 30 s deadline has passed (the deadline cannot have ended it).
[ "$took" -lt 15 ] || { echo "FAIL: the wait took $took s, not at once"; exit 1; }
expected="tensorbrokerd exited (exit status 2) before it was serving on $work/a.sock; its log:
  | tensorbrokerd: --capacity 'nonsense' is not a size (examples: 1048576, 512M, 4G, 1.5GiB)"
[ "$(cat "$work/failure")" = "$expected" ] ||
  { echo "FAIL: the message was:"; cat "$work/failure"; echo "expected:"; echo "$expected"
    exit 1; }
echo "a daemon that exits: failed at once, quoting its exit status and error"

"$daemon" --socket "$work/b.sock" --capacity 64M 2>"$work/b.log" &
pid=$!
wait_for_daemon "$pid" "$work/b.log" "serving on $work/b.sock" test -S "$work/b.sock"
kill -TERM "$pid"
wait "$pid"
echo "a daemon that serves: waited for, and stopped cleanly"
