#!/usr/bin/env bash
# Checks the model of the protocol of reads without a round trip (tests/model/lease_protocol.pml)
# with Spin (Debian: spin): a full search of every interleaving of the model finds no assertion
# violated and no invalid end state; and each of the mistakes the protocol exists to rule out
# (-DSKIP_REVALIDATION, -DSCAN_BEFORE_UNPUBLISH, -DCOUNT_AFTER_RECHECK) is found, so the model
# does check something.
# With one replace before the delete (-DREPLACES=1): about 30 s and 1 GiB. Exit 77 (ctest:
# skipped) when spin is not installed.
# Usage: tests/model/check_lease_protocol.sh
set -euo pipefail
model="$(cd "$(dirname "$0")" && pwd)/lease_protocol.pml"
if ! command -v spin > /dev/null; then
  echo "SKIP: spin is not installed (Debian: apt-get install spin; deploy/install-deps.sh does)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

# Verifies the model built with `define` (may be empty); prints pan's summary; echoes its error count.
verify() {
  local define=$1
  spin -a -DREPLACES=1 ${define:+"$define"} "$model" > spin.log 2>&1 || { cat spin.log >&2; exit 1; }
  cc -O2 -w -DSAFETY -DCOLLAPSE -o pan pan.c
  ./pan -m200000 > pan.log 2>&1 || true
  grep -v '^Depth=' pan.log | grep -E 'errors:|states, stored|assertion violated|depth too small|elapsed' >&2
  if grep -q 'depth too small' pan.log; then
    echo "the search was cut short (-m): not a full search" >&2
    exit 1
  fi
  sed -n 's/.*errors: \([0-9][0-9]*\).*/\1/p' pan.log
}

echo "== the protocol" >&2
errors=$(verify "")
[ "$errors" = 0 ] || { echo "FAIL: the protocol's model has $errors error(s): see above" >&2; exit 1; }
for mistake in SKIP_REVALIDATION SCAN_BEFORE_UNPUBLISH COUNT_AFTER_RECHECK; do
  echo "== with -D$mistake" >&2
  errors=$(verify "-D$mistake")
  [ "$errors" != 0 ] || { echo "FAIL: -D$mistake should violate an assertion" >&2; exit 1; }
done
echo "PASS: every interleaving holds; every mistake is found"
