#!/usr/bin/env bash
# Installs every build and test dependency of tensorbroker from Debian packages.
# Idempotent: when everything is already present it returns in well under a second.
# Usage: deploy/install-deps.sh [--with-torch] [--with-fuzz]   (run as root)
#   --with-torch   PyTorch, for the Python package's interop tests
#   --with-fuzz    clang and its libFuzzer runtime, for tests/fuzz
set -euo pipefail

with_torch=0
with_fuzz=0
for arg in "$@"; do
  case "$arg" in
    --with-torch) with_torch=1 ;;
    --with-fuzz) with_fuzz=1 ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "install-deps.sh: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done

packages=(
  build-essential cmake pkg-config ninja-build ccache
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libboost-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev libsystemd-dev systemd
  python3-grpcio python3-protobuf python3-numpy python3-pytest pybind11-dev python3-dev
  python3-prometheus-client python3-venv python3-pip python3-setuptools python3-wheel
  python3-kubernetes yamllint clang-format-14 libssl-dev openssl spin
)
[ "$with_torch" = 1 ] && packages+=(python3-torch)
[ "$with_fuzz" = 1 ] && packages+=(clang libclang-rt-14-dev)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

if [ "${#missing[@]}" -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# DLPack >= 1.0: Debian 12 ships 0.6; Debian 13's header-only libdlpack-dev 1.0-1 installs
# cleanly. Fetch it through a private sources list so the system's apt sources stay untouched.
dlpack_ok() {
  [ -f /usr/include/dlpack/dlpack.h ] &&
    grep -Eq '#define DLPACK_MAJOR_VERSION [1-9]' /usr/include/dlpack/dlpack.h
}
if ! dlpack_ok; then
  echo "install-deps: installing libdlpack-dev 1.0 from Debian 13"
  tmp=$(mktemp -d)
  chmod 755 "$tmp"
  id _apt &>/dev/null && chown _apt "$tmp"
  trap 'rm -rf "$tmp"' EXIT
  # The Debian mirror this machine already uses (deb822 "URIs:" or one-line "deb URL").
  mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list \
             2>/dev/null | grep -v '^[[:space:]]*#' | grep -oE 'https?://[^ ]+/debian/?( |$)' |
             head -n1 | tr -d ' ' || true)
  mirror=${mirror:-http://deb.debian.org/debian}
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] ${mirror%/} trixie main" \
    >"$tmp/sources.list"
  mkdir -p "$tmp/lists/partial"
  aptopts=(-o "Dir::Etc::SourceList=$tmp/sources.list" -o Dir::Etc::SourceParts=/dev/null
           -o "Dir::State::Lists=$tmp/lists")
  $SUDO apt-get "${aptopts[@]}" update -qq
  (cd "$tmp" && $SUDO apt-get "${aptopts[@]}" download libdlpack-dev)
  $SUDO dpkg -i "$tmp"/libdlpack-dev_*.deb >/dev/null
  dlpack_ok || { echo "install-deps: DLPack >= 1.0 still missing" >&2; exit 1; }
fi
echo "install-deps: all dependencies present"
