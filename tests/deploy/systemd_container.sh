#!/usr/bin/env bash
# The installed .deb under a real systemd (252, PID 1 of a systemd-nspawn container), as CI's
# stage "service under a real systemd". Every other descriptor-store, socket-activation and
# watchdog test plays systemd's part with a harness; this one boots Debian 12 and checks:
#   boot       systemd reaches running (or degraded) in the container
#   install    dpkg -i of the package: user, group, units; the socket unit enabled and
#              listening, the service not started
#   activation the first connection starts the service (socket activation), Type=notify
#              READY and STATUS, the sockets' owner and mode, the hardened unit's process
#              (user tensorbroker, no capabilities, no_new_privs, seccomp, /usr read-only)
#   publish    51 tensors (110 MiB of random bytes, 11 dtypes, assorted shapes, one replaced)
#              put with the CLI and read back byte for byte
#   restart    `systemctl restart`: a new process adopts every tensor, same bytes and metadata
#   crash      `kill -9` of the main process: Restart=on-failure brings it back, tensors intact
#   watchdog   `kill -STOP` of the main process: systemd's watchdog (the unit's own
#              WatchdogSec=30s) kills and restarts it, tensors intact
#   reload     `systemctl reload`: same process; the log level changes at once, a capacity
#              change is logged as waiting for the next start, a broken file is refused
#   stop       `systemctl stop`: the store is emptied, the socket unit keeps listening, the
#              next connection starts an empty broker
#   journal    the daemon's start, ready, adoption and stop lines in `journalctl -u
#              tensorbrokerd`, with their syslog priorities
#
# Usage: tests/deploy/systemd_container.sh [--deb FILE] [--build-dir DIR]
#   --deb FILE       test this package instead of building one
#   --build-dir DIR  where deploy/build-deb.sh builds the package (default: build-systemd/ in
#                    the source tree, git-ignored; kept, so a second run only relinks)
# Environment: TENSORBROKER_CI_CACHE (default /var/cache/tensorbroker-ci) holds the
# debootstrapped root file system (bookworm-rootfs/, with bookworm-rootfs.ready written last;
# made again when missing, incomplete or lacking a package the .deb depends on). Each run boots
# a throwaway overlay (or copy) of it; the container is stopped and removed on every exit.
# Needs root, a Debian 12 host and its package mirror (installs debootstrap and
# systemd-container with apt-get when missing). Ends with "N passed, M failed".
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
started_all=$SECONDS

deb=""
build_dir=$src/build-systemd
while [ $# -gt 0 ]; do
  case "$1" in
    --deb) deb=$(realpath "$2"); shift 2 ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    -h|--help) sed -n '2,33p' "$0"; exit 0 ;;
    *) echo "systemd_container.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
if [ "$(id -u)" -ne 0 ]; then
  echo "systemd_container.sh: needs root (debootstrap, mounts, systemd-nspawn)" >&2
  exit 2
fi

cache=${TENSORBROKER_CI_CACHE:-/var/cache/tensorbroker-ci}
rootfs=$cache/bookworm-rootfs
marker=$cache/bookworm-rootfs.ready
socket=/run/tensorbroker/broker.sock
conf=/etc/tensorbroker/tensorbrokerd.conf

passed=0
failed=0
current=""           # the check under way, for the closing report
work=""
nspawn_pid=""
ct_pid=""            # the container's PID 1, as this host sees it
merged=""
overlay_mounted=0

log() { printf '%s\n' "$*"; }
took() { echo "$(( SECONDS - $1 )) s"; }
fail() {
  echo "FAIL: ${current:+[$current] }$*" >&2
  current=""
  exit 1
}
begin() {
  current=$1
  check_started=$SECONDS
  log "--- $1: $2"
}
pass() {
  passed=$((passed + 1))
  log "PASS $current: $* ($(took "$check_started"))"
  current=""
}

# ---- the container ------------------------------------------------------------------------
# ct CMD...: runs CMD inside the container (all its namespaces), with a clean environment, at
# most CT_TIMEOUT seconds (default 60).
ct() {
  timeout "${CT_TIMEOUT:-60}" nsenter -t "$ct_pid" -a \
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"
}
ct_sh() { ct bash -c "set -euo pipefail; $1"; }
# wait_until SECONDS WHAT CMD...: polls CMD until it succeeds; fails after SECONDS.
wait_until() {
  local limit=$1 what=$2 deadline=$((SECONDS + $1))
  shift 2
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || fail "$what: not within $limit s"
    sleep 0.3
  done
}
prop() { ct systemctl show -p "$1" --value tensorbrokerd.service; }
# logged REGEX JOURNALCTL_ARGS...: a journal line selected by the arguments matches REGEX.
logged() {
  local pattern=$1
  shift
  ct journalctl --no-pager -o cat "$@" | grep -qE -- "$pattern"
}
# wait_logged SECONDS WHAT REGEX JOURNALCTL_ARGS...: lines reach the journal through the
# daemon's stderr stream, not in step with its notifications to systemd, so wait for them.
wait_logged() {
  local limit=$1 what=$2
  shift 2
  wait_until "$limit" "$what in the journal" logged "$@"
}

stop_container() {
  [ -n "$nspawn_pid" ] || return 0
  if kill -0 "$nspawn_pid" 2>/dev/null; then
    # SIGTERM: nspawn asks the container's systemd to power off (SIGRTMIN+3).
    kill -TERM "$nspawn_pid" 2>/dev/null || true
    local deadline=$((SECONDS + 30))
    while kill -0 "$nspawn_pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
    if kill -0 "$nspawn_pid" 2>/dev/null; then
      echo "the container did not power off within 30 s; killing it" >&2
      [ -z "$ct_pid" ] || kill -KILL "$ct_pid" 2>/dev/null || true
      kill -KILL "$nspawn_pid" 2>/dev/null || true
    fi
  fi
  wait "$nspawn_pid" 2>/dev/null || true
  nspawn_pid=""
}
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  set +e
  if [ "$status" -ne 0 ]; then
    failed=$((failed + 1))
    [ -z "$current" ] || echo "FAIL: the check '$current' did not pass" >&2
    if [ -n "$ct_pid" ] && kill -0 "$ct_pid" 2>/dev/null; then
      echo "--- the container's journal for tensorbrokerd (last 60 lines, without clients' connects):" >&2
      CT_TIMEOUT=20 ct journalctl --no-pager -u tensorbrokerd.socket -u tensorbrokerd.service |
        grep -vE ': client (dis)?connected: ' | tail -n 60 >&2
    fi
    if [ -n "$work" ] && [ -s "$work/nspawn.log" ]; then
      echo "--- systemd-nspawn's output (last 20 lines):" >&2
      tail -n 20 "$work/nspawn.log" >&2
    fi
  fi
  local stop_started=$SECONDS
  stop_container
  if [ "$overlay_mounted" = 1 ]; then
    umount "$merged" 2>/dev/null || umount -l "$merged"
    overlay_mounted=0
  fi
  [ -z "$work" ] || rm -rf "$work"
  [ -z "$work" ] || log "container stopped and removed ($(took "$stop_started"))"
  log "total $(took "$started_all")"
  log "$passed passed, $failed failed"
  exit "$status"
}
trap cleanup EXIT
trap 'echo "interrupted (SIGINT)" >&2; exit 130' INT
trap 'echo "interrupted (SIGTERM)" >&2; exit 143' TERM

# ---- host tools -----------------------------------------------------------------------------
need=()
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v systemd-nspawn >/dev/null || need+=(systemd-container)
if [ "${#need[@]}" -gt 0 ]; then
  log "installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# ---- the package ----------------------------------------------------------------------------
if [ -z "$deb" ]; then
  t=$SECONDS
  bash "$src/deploy/install-deps.sh" >/dev/null
  # build-deb.sh prints the package's path last; the build's own output goes to a log.
  build_log=$(mktemp)
  if ! out=$(bash "$src/deploy/build-deb.sh" --build-dir "$build_dir" \
               -- -DTENSORBROKER_SANITIZE= 2>"$build_log"); then
    tail -n 50 "$build_log" >&2
    rm -f "$build_log"
    fail "deploy/build-deb.sh failed"
  fi
  rm -f "$build_log"
  deb=$(printf '%s\n' "$out" | tail -n 1)
  log "built $(basename "$deb") in $build_dir ($(took "$t"))"
fi
[ -f "$deb" ] || fail "no package at '$deb'"
# The packages the root file system needs: systemd and dbus, and every package the .deb
# depends on (the first of alternatives, without versions).
wanted=$( { echo systemd; echo dbus
            { dpkg-deb -f "$deb" Depends; dpkg-deb -f "$deb" Pre-Depends; } | tr ',' '\n' |
              sed 's/|.*//; s/(.*)//; s/:any//' |
              tr -d ' ' | grep -v '^$'; } | sort -u | tr '\n' ' ')
wanted=${wanted% }

# ---- the cached root file system -------------------------------------------------------------
mkdir -p "$cache"
exec 9>"$cache/lock"
# Exclusive while the image is checked or made; shared while it is in use, so that no other
# run replaces it under a running container.
flock -x -w 1800 9 || fail "$cache/lock: still held after 30 min"
rootfs_ready() {
  [ -f "$marker" ] && [ -x "$rootfs/usr/lib/systemd/systemd" ] || return 1
  local have p
  have=" $(sed -n 's/^packages: //p' "$marker") "
  for p in $wanted; do
    case "$have" in *" $p "*) ;; *) return 1 ;; esac
  done
}
if rootfs_ready; then
  log "root file system: cached in $rootfs ($(sed -n 's/^made: //p' "$marker"))"
else
  t=$SECONDS
  log "root file system: making $rootfs (debootstrap --variant=minbase bookworm; packages: $wanted)"
  rm -f "$marker"
  rm -rf "$rootfs" "$rootfs.new"
  # The Debian mirrors this machine uses (deb822 "URIs:" or one-line "deb URL").
  sources=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources \
              /etc/apt/sources.list.d/*.list 2>/dev/null | grep -v '^[[:space:]]*#' || true)
  mirror=$(grep -oE 'https?://[^ ]+/debian/?( |$)' <<<"$sources" | head -n1 | tr -d ' ' || true)
  mirror=${mirror:-http://deb.debian.org/debian}
  security=$(grep -oE 'https?://[^ ]+/debian-security/?( |$)' <<<"$sources" | head -n1 |
               tr -d ' ' || true)
  security=${security:-http://deb.debian.org/debian-security}
  debootstrap --variant=minbase --include=systemd,dbus bookworm "$rootfs.new" "${mirror%/}" \
    >"$cache/debootstrap.log" 2>&1 ||
    { tail -n 30 "$cache/debootstrap.log" >&2; fail "debootstrap failed (log: $cache/debootstrap.log)"; }
  printf 'deb %s bookworm main\ndeb %s bookworm-updates main\ndeb %s bookworm-security main\n' \
    "${mirror%/}" "${mirror%/}" "${security%/}" >"$rootfs.new/etc/apt/sources.list"
  # The package's dependencies, current with the host's suites; nspawn (not booted) runs apt.
  timeout 1200 systemd-nspawn --register=no --keep-unit -q -D "$rootfs.new" \
    --setenv=DEBIAN_FRONTEND=noninteractive bash -c "set -e
      apt-get update -qq
      apt-get -y -qq upgrade
      apt-get install -y -qq --no-install-recommends $wanted
      apt-get clean" >"$cache/apt.log" 2>&1 ||
    { tail -n 30 "$cache/apt.log" >&2; fail "installing the dependencies failed (log: $cache/apt.log)"; }
  # Booted copies get their own machine id.
  : >"$rootfs.new/etc/machine-id"
  mv "$rootfs.new" "$rootfs"
  printf 'made: %s in %s\npackages: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(took "$t")" \
    "$wanted" >"$marker.new"
  mv "$marker.new" "$marker"   # last: the image is complete
  log "root file system: made in $(took "$t") ($(du -sh "$rootfs" | cut -f1))"
fi
flock -s 9

# ---- boot -----------------------------------------------------------------------------------
begin boot "a throwaway copy of the image booted by systemd-nspawn --boot; systemd 252 running"
work=$(mktemp -d /var/tmp/tensorbroker-systemd-ct.XXXXXX)
merged=$work/root
mkdir -p "$merged" "$work/upper" "$work/overlay-work"
if mount -t overlay overlay \
     -o "lowerdir=$rootfs,upperdir=$work/upper,workdir=$work/overlay-work" "$merged" 2>/dev/null; then
  overlay_mounted=1
  how="an overlay on the cached image"
else
  cp -a --reflink=auto "$rootfs/." "$merged/"
  how="a copy of the cached image"
fi
machine=tb-ci-$$
systemd-nspawn --register=no --keep-unit --machine="$machine" -D "$merged" --boot \
  </dev/null >"$work/nspawn.log" 2>&1 9>&- &   # 9: the cache's lock stays with this script
nspawn_pid=$!
# The container's PID 1: nspawn's child whose pid in its own namespace is 1.
find_init() {
  local child
  for child in $(cat /proc/"$nspawn_pid"/task/*/children 2>/dev/null); do
    if grep -qE '^NSpid:.*[[:space:]]1$' "/proc/$child/status" 2>/dev/null; then
      ct_pid=$child
      return 0
    fi
  done
  return 1
}
deadline=$((SECONDS + 30))
until find_init; do
  kill -0 "$nspawn_pid" 2>/dev/null || fail "systemd-nspawn exited: $(tail -n 5 "$work/nspawn.log")"
  [ "$SECONDS" -lt "$deadline" ] || fail "no container init within 30 s"
  sleep 0.2
done
# systemctl needs systemd's private socket, which appears a moment after PID 1 starts.
wait_until 60 "systemd's control socket in the container" ct test -S /run/systemd/private
state=$(CT_TIMEOUT=120 ct systemctl is-system-running --wait || true)
case "$state" in
  running) ;;
  degraded) log "system degraded; failed units: $(ct systemctl --failed --no-legend --plain | tr '\n' ' ')" ;;
  *) fail "systemctl is-system-running: '$state'" ;;
esac
version=$(ct systemctl --version | head -n 1)
case "$version" in "systemd 252"*) ;; *) fail "expected systemd 252, found: $version" ;; esac
[ "$(ct cat /proc/1/comm)" = systemd ] || fail "PID 1 in the container is not systemd"
pass "$version is PID 1 in $how, $state"

# ---- install --------------------------------------------------------------------------------
begin install "dpkg -i $(basename "$deb") in the container"
ct_sh 'cat > /root/tensorbroker.deb' <"$deb"
if ! CT_TIMEOUT=300 ct dpkg -i /root/tensorbroker.deb >"$work/dpkg.log" 2>&1; then
  # The image holds every dependency the package declared when it was made; a dependency
  # added since is fetched here (and the next run remakes the image with it).
  log "dpkg -i failed; apt-get install -f from the image's sources:"
  cat "$work/dpkg.log"
  CT_TIMEOUT=300 ct_sh 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -f -y -qq' ||
    fail "dpkg -i, then apt-get install -f, failed"
fi
[ "$(ct dpkg-query -W -f='${Status}' tensorbroker)" = "install ok installed" ] || fail "not installed"
ct getent passwd tensorbroker >/dev/null || fail "no user tensorbroker"
[ "$(ct systemctl is-enabled tensorbrokerd.socket)" = enabled ] || fail "the socket unit is not enabled"
[ "$(ct systemctl is-active tensorbrokerd.socket)" = active ] || fail "the socket unit is not listening"
state=$(ct systemctl is-active tensorbrokerd.service || true)
[ "$state" = inactive ] || fail "the package started the service ($state); it should only start the socket"
got=$(ct stat -c '%U:%G %a %F' "$socket" "$socket.fd" | tr '\n' ';')
[ "$got" = "tensorbroker:tensorbroker 660 socket;tensorbroker:tensorbroker 660 socket;" ] ||
  fail "the socket unit's sockets: $got"
pass "installed; tensorbrokerd.socket enabled and listening ($socket, $socket.fd: tensorbroker:tensorbroker 0660), tensorbrokerd.service not started"

# ---- socket activation and the hardened unit --------------------------------------------------
begin activation "the first connection starts tensorbrokerd.service; Type=notify; hardening"
ct tensorbroker --socket "$socket" health --timeout 30 >/dev/null ||
  fail "health through the socket unit did not answer SERVING"
[ "$(prop ActiveState)/$(prop SubState)" = active/running ] ||
  fail "the service after the first connection: $(prop ActiveState)/$(prop SubState)"
[ "$(prop TriggeredBy)" = tensorbrokerd.socket ] || fail "TriggeredBy: $(prop TriggeredBy)"
status_serving() { prop StatusText | grep -q '^serving 0 tensor(s)'; }
wait_until 20 "a STATUS= line from the daemon" status_serving
main_pid=$(prop MainPID)
[ "$main_pid" -gt 0 ] || fail "no MainPID"
status=$(ct cat "/proc/$main_pid/status")
[ "$(ct stat -c %U "/proc/$main_pid")" = tensorbroker ] ||
  fail "the main process does not run as tensorbroker"
grep -qE '^NoNewPrivs:[[:space:]]+1$' <<<"$status" || fail "no_new_privs is not set"
grep -qE '^CapEff:[[:space:]]+0+$' <<<"$status" || fail "the daemon has capabilities: $(grep ^Cap <<<"$status")"
grep -qE '^CapBnd:[[:space:]]+0+$' <<<"$status" || fail "the bounding set is not empty"
grep -qE '^Seccomp:[[:space:]]+2$' <<<"$status" || fail "no seccomp filter (SystemCallArchitectures=, RestrictNamespaces=, ...)"
# ProtectSystem=strict: /usr and /etc read-only for the daemon.
ct nsenter -t "$main_pid" -m findmnt -n -o OPTIONS --target /usr | grep -qE '(^|,)ro(,|$)' ||
  fail "/usr is writable for the daemon (ProtectSystem=strict)"
wait_logged 10 "the daemon's line saying it took both sockets from systemd" \
  "^socket activation: the gRPC socket and the local channel's socket handed over by the service manager\$" \
  -u tensorbrokerd.service
pass "SERVING through the socket unit; the service active (running) as pid $main_pid, user tensorbroker, no capabilities, no_new_privs, seccomp, /usr read-only; both sockets taken from LISTEN_FDS; STATUS: $(prop StatusText)"

# ---- publish ---------------------------------------------------------------------------------
begin publish "51 tensors of random bytes put with the CLI, read back byte for byte"
CT_TIMEOUT=120 ct /usr/bin/python3 - <<'EOF'
import hashlib, os
import numpy as np
rng = np.random.default_rng(20261206)
d = "/root/tb-in"
os.makedirs(d)
specs = [  # (name, dtype, shape)
    ("big/f32", np.float32, (2048, 4096)),       # 32 MiB
    ("big/u8", np.uint8, (4096, 4096)),          # 16 MiB
    ("big/f64", np.float64, (1024, 2048)),       # 16 MiB
    ("big/i16", np.int16, (4096, 2048)),         # 16 MiB
    ("scalar/f64", np.float64, ()),
    ("odd/bool", np.bool_, (333, 7)),
    ("odd/f16", np.float16, (17, 19, 23)),
    ("odd/c64", np.complex64, (1000, 3)),
    ("odd/i8", np.int8, (12345,)),
    ("odd/empty", np.float32, (0, 7)),
]
specs += [(f"mid/{i:02d}", [np.float32, np.int32, np.int64, np.uint16][i % 4], (1024, 256 * (1 + i % 4) // 4 * 4))
          for i in range(8)]
specs += [(f"small/{i:02d}", [np.float32, np.uint8, np.int64][i % 3], (1 + 37 * i, 113)) for i in range(32)]
assert len(specs) == 50, len(specs)
def make(dtype, shape):
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    if np.issubdtype(dtype, np.complexfloating):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)
total = 0
with open("/root/tb-names", "w") as names:
    for name, dtype, shape in specs:
        a = make(dtype, shape)
        total += a.nbytes
        np.save(os.path.join(d, name.replace("/", "_") + ".npy"), a)
        names.write(name + "\n")
    # One name published twice: its second version must survive too.
    np.save(os.path.join(d, "replaced.v1.npy"), make(np.float32, (100, 100)))
    np.save(os.path.join(d, "replaced.npy"), make(np.float32, (200, 50)))
    names.write("replaced\n")
print(f"{len(specs) + 1} arrays, {total / 2**20:.1f} MiB")
EOF
ct_sh "cd /root/tb-in
  tensorbroker --socket $socket put replaced replaced.v1.npy
  tensorbroker --socket $socket put replaced replaced.npy --replace
  rm replaced.v1.npy
  while read -r name; do
    [ \"\$name\" = replaced ] || tensorbroker --socket $socket put \"\$name\" \"\${name//\\//_}.npy\"
  done < /root/tb-names
  sha256sum *.npy > /root/tb-in.sha256"
# snapshot NAME: every tensor's metadata (name, version, dtype, shape, owner, readers; not its
# leases or creation time) and the bytes `get` returns, checked against what was put.
snapshot() {
  CT_TIMEOUT=180 ct_sh "rm -rf /root/tb-out && mkdir /root/tb-out && cd /root/tb-out
    while read -r name; do
      tensorbroker --socket $socket get \"\$name\" \"\${name//\\//_}.npy\"
    done < /root/tb-names
    sha256sum --quiet -c /root/tb-in.sha256
    tensorbroker --socket $socket ls --json | python3 -c '
import json, sys
for t in sorted(json.load(sys.stdin), key=lambda t: t[\"name\"]):
    print(t[\"name\"], t[\"version\"], t[\"dtype\"], t[\"shape\"], t[\"device\"], t[\"owner_uid\"], t[\"readers\"])
' > /root/tb-ls.$1" || fail "the tensors read back differ from what was put (see above)"
}
snapshot published
count=$(ct_sh "wc -l < /root/tb-ls.published")
[ "$count" = 51 ] || fail "ls lists $count tensors, expected 51"
grep -q '^replaced ' <(ct cat /root/tb-ls.published) || fail "no tensor 'replaced'"
stats=$(ct tensorbroker --socket "$socket" stats --json)
used=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["used_bytes"])' <<<"$stats")
pass "51 tensors ($((used / 1048576)) MiB used, one name at its second version) read back with identical bytes"

# compare_with_published WHAT: the tensors' metadata and bytes as published.
compare_with_published() {
  snapshot "$1"
  ct diff -u /root/tb-ls.published "/root/tb-ls.$1" >&2 ||
    fail "tensors after $1 differ from those published (names, versions, dtypes, shapes, owners, readers)"
}
# wait_restarted OLD_PID SECONDS: the service active (running) again in a new process.
running_anew() {
  local pid
  pid=$(prop MainPID) && [ "$pid" != "$1" ] && [ "$pid" != 0 ] &&
    [ "$(prop ActiveState)/$(prop SubState)" = active/running ]
}
wait_restarted() { wait_until "$2" "the service running again in a new process" running_anew "$1"; }
# adopted_line: the "adopted ..." line of the current invocation, at priority notice.
adopted_line() {
  ct journalctl --no-pager -o cat -p notice..notice "_SYSTEMD_INVOCATION_ID=$(prop InvocationID)" |
    grep '^adopted ' || true
}
# expect_adopted AFTER: the current invocation adopted all 51 tensors, dropping no record.
expect_adopted() {
  wait_logged 10 "the adoption line after $1" '^adopted ' -p notice..notice \
    "_SYSTEMD_INVOCATION_ID=$(prop InvocationID)"
  line=$(adopted_line)
  case "$line" in
    "adopted 51 tensors (51 CPU, 0 CUDA; "*") in "*" segments and slabs from the previous instance; freed "*" no tensor was in; dropped 0 records; CUDA tensors survive only in VMM slabs (--cuda-handles vmm)") ;;
    *) fail "the adoption line after $1: '$line'" ;;
  esac
}

# ---- restart -----------------------------------------------------------------------------------
begin restart "systemctl restart tensorbrokerd: the tensors come back from the descriptor store"
old_pid=$(prop MainPID)
ct systemctl restart tensorbrokerd.service
wait_restarted "$old_pid" 30
new_pid=$(prop MainPID)
expect_adopted "systemctl restart"
compare_with_published restart
pass "pid $old_pid -> $new_pid; '$line'; every tensor's bytes, version, dtype, shape, owner and readers as published"

# ---- crash ------------------------------------------------------------------------------------
begin crash "kill -9 of the main process: Restart=on-failure, the tensors survive"
old_pid=$(prop MainPID)
restarts=$(prop NRestarts)
ct bash -c "kill -KILL $old_pid"   # bash's kill: procps (/bin/kill) is not in the image
wait_restarted "$old_pid" 30
[ "$(prop NRestarts)" = $((restarts + 1)) ] || fail "NRestarts $(prop NRestarts), expected $((restarts + 1))"
wait_logged 10 "systemd's line on the SIGKILL" "Main process exited, code=killed, status=9/KILL" \
  -u tensorbrokerd.service
expect_adopted "kill -9"
compare_with_published crash
pass "pid $old_pid killed, $(prop MainPID) restarted by systemd (NRestarts $(prop NRestarts)); '$line'; bytes and metadata as published"

# ---- watchdog ---------------------------------------------------------------------------------
begin watchdog "kill -STOP of the main process: the watchdog (WatchdogSec=$(prop WatchdogUSec)) restarts it"
[ "$(prop WatchdogUSec)" = 30s ] || fail "the unit's WatchdogSec: $(prop WatchdogUSec), expected 30s"
old_pid=$(prop MainPID)
restarts=$(prop NRestarts)
stopped_at=$SECONDS
ct bash -c "kill -STOP $old_pid"   # bash's kill: procps (/bin/kill) is not in the image
wait_restarted "$old_pid" 90
waited=$((SECONDS - stopped_at))
[ "$(prop NRestarts)" = $((restarts + 1)) ] || fail "NRestarts $(prop NRestarts), expected $((restarts + 1))"
wait_logged 10 "systemd's watchdog timeout" "Watchdog timeout \\(limit 30s\\)!" -u tensorbrokerd.service
wait_logged 10 "the failure as the watchdog's" "Failed with result 'watchdog'" -u tensorbrokerd.service
expect_adopted "the watchdog"
compare_with_published watchdog
pass "pid $old_pid stopped, restarted by the watchdog after $waited s as $(prop MainPID) (NRestarts $(prop NRestarts)); bytes and metadata as published"

# ---- reload ------------------------------------------------------------------------------------
begin reload "systemctl reload tensorbrokerd re-reads $conf"
pid=$(prop MainPID)
invocation=$(prop InvocationID)
# journal_now [JOURNALCTL ARGS...]: this invocation's lines.
# this_run_logged SECONDS WHAT PRIORITY REGEX: a line of this invocation at PRIORITY.
this_run_logged() {
  wait_logged "$1" "$2" "$4" -p "$3..$3" "_SYSTEMD_INVOCATION_ID=$invocation"
}
ct cp "$conf" /root/tensorbrokerd.conf.orig
ct_sh "sed -i 's/^log-level = .*/log-level = debug/' $conf && grep -qx 'log-level = debug' $conf"
ct systemctl reload tensorbrokerd.service ||
  fail "systemctl reload failed: $(ct systemctl status --no-pager -n 5 tensorbrokerd 2>&1 | tail -n 5)"
this_run_logged 10 "the reload's log line" notice \
  "^SIGHUP: configuration reloaded from $conf: log-level info -> debug\$"
# At debug a Get has a line of its own (at info it has none).
ct tensorbroker --socket "$socket" get small/05 /dev/null
this_run_logged 10 "a debug line for the Get" debug '^Get name="small/05" pid=[0-9]+ uid=0: lease '
# A setting that needs a restart: logged as such.
ct_sh "echo 'capacity = 1G' >> $conf"
ct systemctl reload tensorbrokerd.service
this_run_logged 10 "the capacity change's warning" warning \
  '^SIGHUP: capacity changed \([0-9]+ -> 1073741824\); it takes effect at the next start$'
# A broken file: refused, the running configuration kept.
ct_sh "echo 'no-such-key = 1' >> $conf"
ct systemctl reload tensorbrokerd.service
this_run_logged 10 "the refusal of a broken file" err \
  '^SIGHUP: configuration not reloaded: .*no-such-key.*; keeping the running configuration$'
ct cp /root/tensorbrokerd.conf.orig "$conf"
ct systemctl reload tensorbrokerd.service
this_run_logged 10 "the log level back at info" notice \
  "^SIGHUP: configuration reloaded from $conf: log-level debug -> info\$"
[ "$(prop MainPID)" = "$pid" ] && [ "$(prop InvocationID)" = "$invocation" ] ||
  fail "reload restarted the daemon (pid $pid -> $(prop MainPID))"
[ "$(prop ActiveState)/$(prop SubState)" = active/running ] ||
  fail "the service after the reloads: $(prop ActiveState)/$(prop SubState)"
ct tensorbroker --socket "$socket" health >/dev/null || fail "not serving after the reloads"
pass "same process (pid $pid) throughout: log-level info -> debug at once (a Get logged at debug), capacity logged as waiting for the next start, a broken file refused, back to info"

# ---- stop --------------------------------------------------------------------------------------
begin stop "systemctl stop tensorbrokerd empties the store; the socket unit stays"
# systemctl warns that the socket unit can still activate the service: that is the point.
ct systemctl stop tensorbrokerd.service 2>"$work/stop.err" || fail "systemctl stop: $(cat "$work/stop.err")"
[ "$(ct systemctl is-active tensorbrokerd.service || true)" = inactive ] || fail "the service is not inactive"
[ "$(ct systemctl is-active tensorbrokerd.socket)" = active ] || fail "the socket unit stopped with the service"
this_run_logged 10 "the daemon's shutdown line" info '^received Terminated; shutting down$'
this_run_logged 10 "the daemon's last line" info '^tensorbrokerd stopped$'
ct test -S "$socket" || fail "the socket file went away with the service"
# The next connection starts a new, empty broker.
listing=$(ct tensorbroker --socket "$socket" ls --json) || fail "ls through the socket unit failed"
[ "$(python3 -c 'import json,sys; print(len(json.load(sys.stdin)))' <<<"$listing")" = 0 ] ||
  fail "tensors after stop and start: $listing"
[ "$(prop ActiveState)" = active ] || fail "the connection did not start the service"
tensors=$(ct tensorbroker --socket "$socket" stats --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["tensors"])')
[ "$tensors" = 0 ] || fail "stats: $tensors tensors after stop and start"
line=$(adopted_line)
[ -z "$line" ] || fail "the broker started after stop adopted something: '$line'"
pass "the service stopped cleanly, tensorbrokerd.socket kept listening; the next connection started a broker with 0 tensors and nothing adopted"

# ---- journal -----------------------------------------------------------------------------------
begin journal "the daemon's lines in journalctl -u tensorbrokerd, with their priorities"
journal=$(ct journalctl --no-pager -o cat -u tensorbrokerd.service)
starts=$(grep -c "^tensorbrokerd serving on $socket capacity=[0-9.]* [KMGT]iB pid=[0-9]*\$" <<<"$journal" || true)
# The first start, systemctl restart, the crash, the watchdog, and the start after stop.
[ "$starts" = 5 ] || fail "$starts 'tensorbrokerd serving on' lines, expected 5"
[ "$(grep -c '^systemd watchdog: 30s; pinging every 15s after a health check$' <<<"$journal")" = 5 ] ||
  fail "the watchdog line is not there once per start"
[ "$(grep -c '^Started tensorbrokerd.service' <<<"$journal")" = 5 ] ||
  fail "systemd did not log 5 starts (READY=1 each time)"
[ "$(grep -c '^adopted 51 tensors (51 CPU' <<<"$journal")" = 3 ] || fail "not 3 adoption lines"
grep -q '^CUDA: ' <<<"$journal" || fail "no CUDA line at start"
[ "$(ct journalctl --no-pager -o cat -p info..info -u tensorbrokerd.service | grep -c '^tensorbrokerd serving on ')" = 5 ] ||
  fail "the serving lines are not at priority info"
[ "$(ct journalctl --no-pager -o cat -p notice..notice -u tensorbrokerd.service | grep -c '^adopted ')" = 3 ] ||
  fail "the adoption lines are not at priority notice"
! grep -q '^<[0-7]>' <<<"$journal" || fail "journald kept a syslog prefix in a message"
ct journalctl --no-pager -o cat -u tensorbrokerd.socket | grep -q '^Listening on tensorbrokerd.socket' ||
  fail "no 'Listening on' line for the socket unit"
pass "5 starts (serving, watchdog and Started lines), 3 adoptions (notice), stop lines; priorities from the <N> prefixes"

current=""
log "service under a real systemd: all checks passed ($(took "$started_all"))"
