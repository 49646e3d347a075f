#!/usr/bin/env bash
# Checks the systemd files offline: `systemd-analyze verify` on the configured service and
# socket units (the service's ExecStart pointed at the binary under test, since verify wants an
# executable there; the socket's paths those the service serves on) and
# `systemd-sysusers` on the sysusers.d entry and `systemd-tmpfiles --create` on the tmpfiles.d
# entry, both into a scratch root.
#   verify_systemd.sh SERVICE_UNIT SYSUSERS TENSORBROKERD TMPFILES SOCKET_UNIT
set -euo pipefail
unit=$1 sysusers=$2 daemon=$3 tmpfiles=$4 socket_unit=$5
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
grep -q '^Type=notify$' "$unit"
grep -q '^ExecStart=/.*/tensorbrokerd --socket /run/tensorbroker/broker.sock$' "$unit"
grep -q '^ListenStream=/run/tensorbroker/broker.sock$' "$socket_unit"
grep -q '^ListenSequentialPacket=/run/tensorbroker/broker.sock.fd$' "$socket_unit"
grep -q '^SocketMode=0660$' "$socket_unit"
grep -q '^SocketGroup=tensorbroker$' "$socket_unit"
grep -q '^Requires=tensorbrokerd.socket$' "$unit"
sed "s|^ExecStart=[^ ]*|ExecStart=$daemon|" "$unit" > "$work/tensorbrokerd.service"
cp "$socket_unit" "$work/tensorbrokerd.socket"
(cd "$work" && systemd-analyze verify ./tensorbrokerd.socket ./tensorbrokerd.service)
echo "systemd-analyze verify: ok (tensorbrokerd.socket, tensorbrokerd.service)"
mkdir -p "$work/root/etc"
out=$(systemd-sysusers --root="$work/root" "$sysusers" 2>&1)
grep -q '^tensorbroker:x:[0-9]*:$' "$work/root/etc/group" || { echo "$out"; exit 1; }
grep -q '^tensorbroker:x:[0-9]*:[0-9]*:tensorbroker daemon:/nonexistent:/usr/sbin/nologin$' \
  "$work/root/etc/passwd" || { echo "$out"; cat "$work/root/etc/passwd"; exit 1; }
echo "systemd-sysusers: user and group tensorbroker created in a scratch root"
uid=$(awk -F: '$1 == "tensorbroker" { print $3 }' "$work/root/etc/passwd")
gid=$(awk -F: '$1 == "tensorbroker" { print $3 }' "$work/root/etc/group")
systemd-tmpfiles --root="$work/root" --create "$tmpfiles"
got=$(stat -c '%u:%g %a' "$work/root/run/tensorbroker")
[ "$got" = "$uid:$gid 750" ] || { echo "/run/tensorbroker: $got, expected $uid:$gid 750"; exit 1; }
echo "systemd-tmpfiles: /run/tensorbroker created, owned by tensorbroker, mode 0750"
