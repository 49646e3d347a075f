#!/bin/sh
# Runs one libFuzzer program for ctest -L fuzz (tests/fuzz/CMakeLists.txt).
#   run_target.sh inputs PROGRAM FUZZ_DIR NAME WORK_DIR 0
#       every file of FUZZ_DIR/corpus/NAME and FUZZ_DIR/regressions/NAME, once each
#   run_target.sh fuzz PROGRAM FUZZ_DIR NAME WORK_DIR SECONDS
#       fuzzing for SECONDS from those inputs; new inputs go to WORK_DIR/new (never into the
#       source tree)
# Crashes, leaks, timeouts and out-of-memory inputs are written to WORK_DIR/artifacts/ and fail
# the test (libFuzzer exits non-zero).
set -eu
mode=$1 program=$2 fuzz_dir=$3 name=$4 work=$5 seconds=$6
corpus=$fuzz_dir/corpus/$name
regressions=$fuzz_dir/regressions/$name
mkdir -p "$work/new" "$work/artifacts"
dirs=$corpus
[ -d "$regressions" ] && dirs="$dirs $regressions"
# -timeout: one input taking 10 s is a hang; -rss_limit_mb: an input must not need 2 GiB.
common="-timeout=10 -rss_limit_mb=2048 -artifact_prefix=$work/artifacts/"
case $mode in
  inputs)
    # Files as arguments: libFuzzer runs each once and stops at the first failure.
    # shellcheck disable=SC2086
    files=$(find $dirs -type f | sort)
    [ -n "$files" ] || { echo "no inputs in $dirs" >&2; exit 1; }
    # shellcheck disable=SC2086
    exec "$program" $common $files
    ;;
  fuzz)
    # shellcheck disable=SC2086
    exec "$program" $common -max_total_time="$seconds" -print_final_stats=1 "$work/new" $dirs
    ;;
  *)
    echo "usage: $0 inputs|fuzz PROGRAM FUZZ_DIR NAME WORK_DIR SECONDS" >&2
    exit 2
    ;;
esac
