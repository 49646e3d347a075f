#!/bin/bash
# The layer check fails where it should: a copy of the tree's sources with one forbidden
# include per kind of edge must fail, naming each file, line and edge; the untouched copy passes.
#   tests/style/check_layers_rejects.sh SOURCE_ROOT
set -euo pipefail
root=$(cd "$1" && pwd)
copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
(cd "$root" && git ls-files '*.cc' '*.h' | tar -cf - -T -) | tar -xf - -C "$copy"
check() { /usr/bin/python3 "$root/tests/style/check_layers.py" "$copy"; }
check >/dev/null || { echo "FAIL: the untouched copy does not pass"; exit 1; }

# file to touch | include it gets | the words the check must print
cases=(
  "daemon/memory/memfd_segment.h|daemon/frontend/grpc/broker_service.h|daemon/memory may not depend on daemon/frontend/grpc"
  "daemon/net/socket_files.h|daemon/store/tensor_store.h|daemon/net may not depend on daemon/store"
  "daemon/store/tensor_store.h|daemon/persistence/adoption.h|daemon/store may not depend on daemon/persistence"
  "common/byte_size.h|daemon/app/daemon.h|base may not depend on daemon/app"
  "common/tensor_layout.h|grpcpp/grpcpp.h|base stays free of gRPC and protobuf"
  "client/src/connection.h|daemon/store/tensor_store.h|client may not depend on daemon/store"
  "python/src/py_client.h|client/src/connection.h|python may not depend on client"
  "bench/units.h|daemon/base/log.h|bench may not depend on daemon/base"
)
for case in "${cases[@]}"; do
  IFS='|' read -r file include words <<<"$case"
  echo "#include \"$include\"" >>"$copy/$file"
done
set +e
output=$(check 2>&1)
rc=$?
set -e
[[ $rc -eq 1 ]] || { echo "FAIL: check_layers exited $rc on forbidden includes"; echo "$output"; exit 1; }
for case in "${cases[@]}"; do
  IFS='|' read -r file include words <<<"$case"
  grep -qF "$file:" <<<"$output" && grep -qF "\"$include\": $words" <<<"$output" ||
    { echo "FAIL: no report of $file including $include ($words)"; echo "$output"; exit 1; }
done
echo "PASS: ${#cases[@]} forbidden includes reported, each with its file, line and edge"
