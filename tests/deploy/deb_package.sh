#!/usr/bin/env bash
# The Debian package, end to end on this machine: builds it (deploy/build-deb.sh), installs it
# with dpkg -i, checks what its maintainer scripts made (user, group, /run/tensorbroker, the
# conffile), starts the installed daemon by hand as the service would run it (no systemd PID 1
# here), drives it with the installed CLI and Python package (stats, put/get, the socket's group
# gate), stops it; removes the package (the conffile and an admin's edit stay, the unit is
# masked), installs it again (the edit survives, the unit is unmasked), then purges it and checks
# that none of its files, and none of systemd's state for its unit, is left.
#   deb_package.sh SOURCE_DIR [SANITIZE [PYTHON_PRELOAD [BUILD_DIR]]]
# SANITIZE ('', address, thread) builds the package with that sanitizer, like the suite's tree;
# PYTHON_PRELOAD is then the runtime the (uninstrumented) Python must preload. BUILD_DIR (kept,
# so a second run only relinks) is where the package is built; the suite passes a sibling of its
# own tree, where ccache (see CMakeLists.txt) finds every object the suite's build compiled.
set -euo pipefail
src=$1 sanitize=${2:-} python_preload=${3:-} build_dir=${4:-}

if [ "$(id -u)" -ne 0 ]; then
  echo "Skipped: dpkg -i needs root (run the suite as root, as deploy/run-tests.sh does in CI)"
  exit 77
fi
# Installed, or removed with its configuration kept: either way this test's purge would
# destroy an administrator's package or configuration.
if status=$(dpkg-query -W -f='${Status}' tensorbroker 2>/dev/null) &&
   [ "$status" != "unknown ok not-installed" ]; then
  echo "FAIL: a tensorbroker package is known to dpkg here ($status); this test would purge it" >&2
  exit 1
fi

work=$(mktemp -d)
daemon_pid=""
socket=/run/tensorbroker/broker.sock
cleanup() {
  [ -z "$daemon_pid" ] || { kill -TERM "$daemon_pid" 2>/dev/null; wait "$daemon_pid" || true; }
  if dpkg-query -W -f='${Status}' tensorbroker 2>/dev/null | grep -q installed; then
    dpkg --purge tensorbroker >/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
expect_eq() { [ "$1" = "$2" ] || fail "$3: got '$1', expected '$2'"; }
expect_in() { case "$1" in *"$2"*) ;; *) fail "$3: '$2' is not in: $1" ;; esac; }
# wait_serving PID SOCKET LOG: returns once the daemon PID answers on SOCKET; fails at once, with
# its log, when it exits first (support/daemon_wait.sh; bounded in time, not tries).
. "$src/tests/support/daemon_wait.sh"
serves() { /usr/bin/tensorbroker --socket "$1" health --timeout 1 >/dev/null 2>&1; }
wait_serving() {
  DAEMON_WAIT_DEADLINE=60 wait_for_daemon "$1" "$3" "serving on $2" serves "$2" ||
    fail "the installed tensorbrokerd did not serve on $2"
}
# refused_at_once LOG COMMAND...: COMMAND (a second daemon) must exit 1 without serving; its
# stderr goes to LOG. 60 s guard against a hang (it exits in milliseconds).
refused_at_once() {
  local log=$1 status=0
  shift
  timeout 60 "$@" >/dev/null 2>"$log" || status=$?
  [ "$status" -eq 1 ] || fail "a second daemon on a served socket exited with $status; its log:
$(cat "$log")"
}

build_started=$(date +%s)
bash "$src/deploy/build-deb.sh" --build-dir "${build_dir:-$work/build}" --out "$work/out" \
  -- -DTENSORBROKER_SANITIZE="$sanitize" >/dev/null 2>"$work/build.err" ||
  { cat "$work/build.err" >&2; fail "deploy/build-deb.sh"; }
deb=$(ls "$work"/out/tensorbroker_*_"$(dpkg --print-architecture)".deb)
echo "built $(basename "$deb") in $(( $(date +%s) - build_started )) s"

depends=$(dpkg-deb -f "$deb" Depends)
for needed in adduser procps 'libgrpc++1.51' libprotobuf32 libsystemd0 python3-numpy 'python3 (>= 3.11)'; do
  case "$depends" in *"$needed"*) ;; *) fail "Depends lacks $needed: $depends" ;; esac
done
echo "Depends: $depends"
# Every file and link the package ships, to check after the purge.
dpkg-deb -c "$deb" | awk '$1 !~ /^d/ { print $6 }' | sed 's|^\.||' > "$work/shipped"
[ "$(wc -l < "$work/shipped")" -gt 20 ] || fail "the package ships too few files"

dpkg -i "$deb" >/dev/null
expect_eq "$(dpkg-query -W -f='${Status}' tensorbroker)" "install ok installed" "dpkg status"
getent group tensorbroker >/dev/null || fail "postinst made no group tensorbroker"
expect_eq "$(id -gn tensorbroker)" tensorbroker "the user's primary group"
expect_eq "$(stat -c '%U:%G %a' /run/tensorbroker)" "tensorbroker:tensorbroker 750" "/run/tensorbroker"
dpkg-query -W -f='${Conffiles}' tensorbroker | grep -q '/etc/tensorbroker/tensorbrokerd.conf' ||
  fail "/etc/tensorbroker/tensorbrokerd.conf is not a conffile"
systemd-analyze verify /usr/lib/systemd/system/tensorbrokerd.service \
  /usr/lib/systemd/system/tensorbrokerd.socket
expect_eq "$(readlink /etc/systemd/system/sockets.target.wants/tensorbrokerd.socket)" \
  /lib/systemd/system/tensorbrokerd.socket "the socket unit, enabled on install"
grep -qx 'ExecStart=/usr/sbin/tensorbrokerd --socket /run/tensorbroker/broker.sock' \
  /usr/lib/systemd/system/tensorbrokerd.service || fail "the unit's ExecStart"
/usr/sbin/tensorbrokerd --print-config |
  grep -qx "# tensorbrokerd's effective configuration (config file: /etc/tensorbroker/tensorbrokerd.conf)" ||
  fail "the installed daemon does not read /etc/tensorbroker/tensorbrokerd.conf"
echo "installed: user and group, /run/tensorbroker, conffile, unit"

# The quick start (deploy/run-broker.sh: tensorbrokerd as root on the default socket, which is
# the service's) and the service share the socket one after the other, whoever's files are left.
as_service=(setpriv --reuid tensorbroker --regid tensorbroker --init-groups)
/usr/sbin/tensorbrokerd --capacity 64M --log-level info 2>"$work/quick.log" &
daemon_pid=$!
wait_serving "$daemon_pid" "$socket" "$work/quick.log"
# The service starting meanwhile fails at once, naming the quick start's daemon.
refused_at_once "$work/refused.log" "${as_service[@]}" /usr/sbin/tensorbrokerd --socket "$socket"
expect_in "$(cat "$work/refused.log")" \
  "--socket $socket is served by another tensorbrokerd: pid $daemon_pid (tensorbrokerd, user root" \
  "the service's refusal"
expect_in "$(cat "$work/refused.log")" "stop it with \`kill $daemon_pid\`" "the service's refusal"
quick_pid=$daemon_pid
kill -INT "$daemon_pid"  # Ctrl-C
wait "$daemon_pid" || fail "the quick start's daemon exited with $? on SIGINT"
daemon_pid=""
expect_eq "$(stat -c '%U %a' "$socket.lock")" "root 644" "the lock file the quick start left"

# The daemon as the unit runs it: user and group tensorbroker, the socket in /run/tensorbroker.
"${as_service[@]}" /usr/sbin/tensorbrokerd --socket "$socket" --capacity 64M --log-level info \
  2>"$work/service.log" &
daemon_pid=$!
wait_serving "$daemon_pid" "$socket" "$work/service.log"
expect_in "$(cat "$work/service.log")" \
  "replaced the lock file $socket.lock left behind by uid 0 (root), pid $quick_pid, which no longer holds it" \
  "the service's log"
expect_eq "$(stat -c '%U %a' "$socket.lock")" "tensorbroker 644" "the lock file the service took"
# The quick start while the service runs fails at once, naming the service's daemon.
refused_at_once "$work/refused.log" /usr/sbin/tensorbrokerd --capacity 64M
expect_in "$(cat "$work/refused.log")" \
  "--socket $socket is served by another tensorbrokerd: pid $daemon_pid (tensorbrokerd, user tensorbroker" \
  "the quick start's refusal"
echo "shared socket: the quick start as root, stopped, then the service as tensorbroker (stale lock replaced); each refused while the other serves"
expect_eq "$(stat -c '%U:%G %a' "$socket")" "tensorbroker:tensorbroker 660" "the socket"
/usr/bin/tensorbroker --socket "$socket" stats --json | grep -q '"tensors": 0' || fail "stats"

/usr/bin/python3 -c "import numpy; numpy.save('$work/in.npy', numpy.arange(1000, dtype=numpy.float32).reshape(10, 100))"
/usr/bin/tensorbroker --socket "$socket" put deb/x "$work/in.npy"
/usr/bin/tensorbroker --socket "$socket" get deb/x "$work/out.npy"
cmp "$work/in.npy" "$work/out.npy" || fail "get returned other bytes than put"
/usr/bin/tensorbroker --socket "$socket" stats --json | grep -q '"tensors": 1' || fail "stats after put"
echo "CLI: stats, put and get of a 10x100 float32 tensor (bytes identical)"

# The installed Python package (not the build tree's), from a neutral directory.
(cd "$work" && env -u PYTHONPATH LD_PRELOAD="$python_preload" ASAN_OPTIONS=detect_leaks=0 \
  /usr/bin/python3 -c "
import numpy, tensorbroker
assert tensorbroker.__file__.startswith('/usr/lib/python3/dist-packages/'), tensorbroker.__file__
with tensorbroker.connect('$socket') as broker:
    with broker.get('deb/x') as t:
        a = numpy.from_dlpack(t)
        assert a.shape == (10, 100) and a[9, 99] == 999.0, (a.shape, a[9, 99])
print('Python: the installed package read deb/x')
")

# The group gates the socket: a uid outside it is refused, the same uid with the group is served.
gid=$(getent group tensorbroker | cut -d: -f3)
if setpriv --reuid 65534 --regid 65534 --clear-groups \
     /usr/bin/tensorbroker --socket "$socket" stats >/dev/null 2>"$work/denied.err"; then
  fail "a process outside group tensorbroker reached the socket"
fi
grep -qi "permission denied" "$work/denied.err" || fail "refusal reason: $(cat "$work/denied.err")"
setpriv --reuid 65534 --regid 65534 --groups "$gid" \
  /usr/bin/tensorbroker --socket "$socket" stats >/dev/null || fail "a group member was refused"
echo "socket: nobody refused (permission denied); nobody with group tensorbroker served"

kill -TERM "$daemon_pid"
wait "$daemon_pid" || fail "the installed daemon exited with $? on SIGTERM"
daemon_pid=""
[ ! -e "$socket" ] || fail "the daemon left its socket behind"

# Remove, keeping the configuration: an admin's edit of the conffile stays; the unit is masked.
echo "# edited by the administrator" >> /etc/tensorbroker/tensorbrokerd.conf
dpkg -r tensorbroker >/dev/null
expect_eq "$(dpkg-query -W -f='${Status}' tensorbroker)" "deinstall ok config-files" "after dpkg -r"
[ ! -e /usr/sbin/tensorbrokerd ] || fail "dpkg -r left the daemon"
tail -n1 /etc/tensorbroker/tensorbrokerd.conf | grep -qx "# edited by the administrator" ||
  fail "dpkg -r lost the administrator's edit of the conffile"
expect_eq "$(readlink /etc/systemd/system/tensorbrokerd.service)" /dev/null "the unit after dpkg -r"
expect_eq "$(readlink /etc/systemd/system/tensorbrokerd.socket)" /dev/null "the socket unit after dpkg -r"
# Installed again: the edit is kept, the unit unmasked.
dpkg -i "$deb" >/dev/null
tail -n1 /etc/tensorbroker/tensorbrokerd.conf | grep -qx "# edited by the administrator" ||
  fail "reinstalling replaced the administrator's conffile"
[ ! -e /etc/systemd/system/tensorbrokerd.service ] || fail "reinstalling left the unit masked"
[ ! -e /etc/systemd/system/tensorbrokerd.socket ] || fail "reinstalling left the socket masked"
echo "remove and reinstall: the edited conffile kept, the unit masked while removed"

dpkg --purge tensorbroker >/dev/null
if dpkg-query -W -f='${Status}' tensorbroker 2>/dev/null | grep -q installed; then
  fail "still installed after dpkg --purge"
fi
left=$(while read -r path; do
         if [ -e "$path" ] || [ -L "$path" ]; then echo "$path"; fi
       done < "$work/shipped")
[ -z "$left" ] || fail "left behind after purge: $left"
for dir in /etc/tensorbroker /run/tensorbroker /usr/include/tensorbroker /usr/lib/cmake/tensorbroker \
           /usr/lib/python3/dist-packages/tensorbroker /usr/share/doc/tensorbroker \
           /etc/systemd/system/tensorbrokerd.service /etc/systemd/system/tensorbrokerd.socket \
           /etc/systemd/system/sockets.target.wants/tensorbrokerd.socket \
           /var/lib/systemd/deb-systemd-helper-enabled/tensorbrokerd.socket.dsh-also \
           /var/lib/systemd/deb-systemd-helper-masked/tensorbrokerd.socket \
           /var/lib/systemd/deb-systemd-helper-enabled/tensorbrokerd.service.dsh-also \
           /var/lib/systemd/deb-systemd-helper-masked/tensorbrokerd.service; do
  [ ! -e "$dir" ] || fail "left behind after purge: $dir"
done
echo "purged: none of the $(wc -l < "$work/shipped") shipped files, no tensorbroker directory and no systemd state is left"
echo "(the system user and group tensorbroker stay, as Debian keeps every system account)"
