#!/usr/bin/env bash
# Lists the dynamic symbols an installed libtensorbroker_client defines and fails on any that is
# not its API: only tensorbroker:: names (with their vtables and typeinfo) may be there, none of
# them in client_internal, and no gRPC, protobuf, Abseil, CUDA or std instantiations. Checks
# too that the API a consumer needs is there.
#   check_exports.sh LIBRARY
set -euo pipefail
library=$1
symbols=$(nm -D --defined-only -C "$library" | cut -d' ' -f3-)
total=$(printf '%s\n' "$symbols" | grep -c . || true)

api='^((typeinfo|typeinfo name|vtable) for )?tensorbroker::'
strays=$(printf '%s\n' "$symbols" | grep -vE "$api" | grep -v '^TENSORBROKER_' || true)
internal=$(printf '%s\n' "$symbols" | grep -E 'client_internal|grpc|google::protobuf' || true)
if [ -n "$strays$internal" ]; then
  echo "check_exports: $library exports what is not its API:" >&2
  printf '%s\n' "$strays" "$internal" | grep . | sort -u | cut -c1-240 | head -n 40 >&2
  exit 1
fi
for wanted in 'tensorbroker::Client::Connect(' 'tensorbroker::Client::Get(' \
    'tensorbroker::StreamWriter::Open(' 'tensorbroker::StreamReader::Open(' \
    'tensorbroker::ParseDTypeName(' 'tensorbroker::DefaultSocketPath' \
    'tensorbroker::GetCancellation::Cancel()' 'typeinfo for tensorbroker::Watcher'; do
  printf '%s\n' "$symbols" | grep -qF "$wanted" ||
    { echo "check_exports: $library does not export $wanted" >&2; exit 1; }
done
echo "check_exports: $library exports $total symbols, every one of them tensorbroker's API"
