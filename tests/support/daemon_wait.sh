# Waiting for a tensorbrokerd that a shell test started to reach a state (its socket made, a log
# line), the shell's one way of doing it, as tests/support/daemon_wait.h is C++'s and
# tests/python/daemon_wait.py Python's: bounded in wall-clock time (a deadline, never a count of
# tries), and failing at once, with the daemon's exit status and the end of its log, when the
# daemon exits first. Source it:
#
#   . "$repo/tests/support/daemon_wait.sh"
#   tensorbrokerd --socket "$socket" 2>"$log" &
#   wait_for_daemon $! "$log" "serving on $socket" test -S "$socket"

# wait_for_daemon PID LOG STATE COMMAND...
# Runs COMMAND every 0.05 s until it succeeds (returns 0). Returns 1, with a message on stderr
# that quotes the last 100 lines of LOG, at once when PID (a child of this shell, started with &)
# has exited, saying its exit status ("tensorbrokerd exited (exit status 2) before it was STATE"),
# and once DAEMON_WAIT_DEADLINE seconds (30) have passed.
wait_for_daemon() {
  local pid=$1 log=$2 state=$3
  shift 3
  local deadline_s=${DAEMON_WAIT_DEADLINE:-30}
  local give_up=$(( $(date +%s%N) / 1000000 + deadline_s * 1000 ))
  while true; do
    if daemon_wait_exited "$pid"; then
      local status=0
      wait "$pid" || status=$?
      local how="exit status $status"
      [ "$status" -le 128 ] || how="killed by signal $((status - 128)) (SIG$(kill -l "$status"))"
      echo "tensorbrokerd exited ($how) before it was $state; its log:" >&2
      daemon_wait_quote_log "$log" >&2
      return 1
    fi
    if "$@"; then return 0; fi
    if [ "$(( $(date +%s%N) / 1000000 ))" -ge "$give_up" ]; then
      echo "tensorbrokerd is not $state after $deadline_s s; its log:" >&2
      daemon_wait_quote_log "$log" >&2
      return 1
    fi
    sleep 0.05
  done
}

# daemon_wait_exited PID: true when PID is gone or has exited (a zombie until it is waited for).
daemon_wait_exited() {
  local state
  state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 0
  [ -z "$state" ] || [ "$state" = Z ] || [ "$state" = X ]
}

# daemon_wait_quote_log LOG: its last 100 lines, each prefixed with "  | ".
daemon_wait_quote_log() {
  if [ -s "$1" ]; then
    tail -n 100 "$1" | sed 's/^/  | /'
  else
    echo "  | (empty)"
  fi
}
